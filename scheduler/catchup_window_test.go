package scheduler_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestCatchupIsNeverCutOff: every replica was down for 30 hours; the job runs
// every second with a 48-hour catch-up window: 108,000 slots to account for.
// Every one gets a record (missed), in chunks, and catchup last runs the
// latest, not one cut off two hours before it (the plan used to stop at
// 100,000). It runs against a real Redis: 108,000 claims through miniredis's
// Lua take half a minute under -race.
func TestCatchupIsNeverCutOff(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	store, err := slotstore.New(srv.Client(), srv.Key("cutoff"))
	if err != nil {
		t.Fatal(err)
	}
	// A misfire grace of 1s: the latest missed slots are recorded once their
	// grace has passed on Redis's clock, a second after the start, not a
	// minute.
	job := scheduler.Job{Name: "j", Schedule: "@every 1s", CatchupWindow: 48 * time.Hour, Retention: 49 * time.Hour, LeaseTTL: time.Second,
		MisfireGrace: time.Second}
	// The job's last slot ran 30 hours ago.
	down := time.Now().Add(-30 * time.Hour).Truncate(time.Second)
	seedDone(t, store, job, down)

	var (
		mu   sync.Mutex
		runs []time.Time
	)
	reg := registry(t, map[string]jobs.Func{"j": func(ctx context.Context, run jobs.Run) error {
		mu.Lock()
		runs = append(runs, run.Slot)
		mu.Unlock()
		return nil
	}})
	start := time.Now()
	s, err := scheduler.New(store, reg, scheduler.WithJobs(job), scheduler.WithReplicaID("r1"),
		scheduler.WithSkewLimits(50*time.Millisecond, 100*time.Millisecond), scheduler.WithKeyPrefix(store.Prefix()),
		scheduler.WithLogger(newTestLog(t).logger(slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	// Slots within max_skew of the scheduler's start are claimed live;
	// catchup last runs the latest before them, and the slots between the
	// last run and that one are recorded missed, oldest first. The catch-up
	// run is the earliest run, and once the slot before it is recorded
	// missed, the backlog is done. Wait for that (bounded: a busy machine is
	// slower, a cut-off plan never gets there). The scheduler plans from its
	// own start, which a busy machine delays: the catch-up run may be a slot
	// or two after the one the test saw last before starting it.
	latest := start.Add(-100 * time.Millisecond).Truncate(time.Second)
	var caught time.Time
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		mu.Lock()
		if len(runs) > 0 {
			caught = slices.MinFunc(runs, time.Time.Compare)
		}
		mu.Unlock()
		if !caught.IsZero() {
			rec, ok, err := store.Record(ctx, "j", caught.Add(-time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if ok && rec.State == slot.StateMissed {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes: earliest run %v, and the slot before it has no missed record", caught)
		}
	}
	if caught.Before(latest) {
		t.Fatalf("catch-up ran slot %s, older than %s, the latest slot before the start: the plan was cut off",
			caught.Format(time.TimeOnly), latest.Format(time.TimeOnly))
	}
	latest = caught
	// Every slot between the last run and the latest has a missed record.
	rdb := srv.Client()
	n, bad := 0, 0
	var firstBad time.Time
	for at := down.Add(time.Second); at.Before(latest); {
		pipe := rdb.Pipeline()
		var cmds []*redis.StringCmd
		var slots []time.Time
		for k := 0; k < 10000 && at.Before(latest); k, at = k+1, at.Add(time.Second) {
			cmds = append(cmds, pipe.Get(ctx, slotstore.RecordKey(store.Prefix(), "j", at)))
			slots = append(slots, at)
		}
		pipe.Exec(ctx)
		for i, c := range cmds {
			n++
			if state, _, _ := strings.Cut(c.Val(), " "); state != string(slot.StateMissed) { // a record's first word is its state
				if bad == 0 {
					firstBad = slots[i]
				}
				bad++
			}
		}
	}
	if bad > 0 || n < 100_000 {
		t.Fatalf("%d of %d slots have no missed record (the first %s)", bad, n, firstBad.Format(time.DateTime))
	}
	t.Logf("%d slots recorded missed in %v; %s ran", n, time.Since(start).Round(time.Millisecond), latest.Format(time.TimeOnly))
}

// TestSlotsOlderThanTheWindowOnRedis: the job (every second, a catch-up
// window of 1 minute, a retention of 2 hours) last ran 3 hours ago. On a
// real Redis, a starting replica records missed every slot from the
// retention (plus max_skew) before its start to the window, 7,140 or so,
// saying that they were older than the window, and none older. Before, the
// 7,140 slots kept no record.
func TestSlotsOlderThanTheWindowOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	store, err := slotstore.New(srv.Client(), srv.Key("older"))
	if err != nil {
		t.Fatal(err)
	}
	job := scheduler.Job{Name: "j", Schedule: "@every 1s", CatchupWindow: time.Minute, Retention: 2 * time.Hour, LeaseTTL: time.Second,
		MisfireGrace: time.Second}
	down := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	seedDone(t, store, job, down)

	reg := registry(t, map[string]jobs.Func{"j": func(context.Context, jobs.Run) error { return nil }})
	const maxSkew = 100 * time.Millisecond
	before := time.Now()
	s, err := scheduler.New(store, reg, scheduler.WithJobs(job), scheduler.WithReplicaID("r1"),
		scheduler.WithSkewLimits(50*time.Millisecond, maxSkew), scheduler.WithKeyPrefix(store.Prefix()),
		scheduler.WithLogger(newTestLog(t).logger(slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	// The oldest slot recorded is the first after before-2h-maxSkew (the
	// start is a little later); the latest older than the window, before-1m
	// or a little later. Wait until that one is recorded: the backlog goes
	// oldest first.
	oldest := before.Add(-2*time.Hour - maxSkew).Truncate(time.Second).Add(time.Second)
	latest := before.Add(-time.Minute).Truncate(time.Second)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		rec, ok, err := store.Record(ctx, "j", latest)
		if err != nil {
			t.Fatal(err)
		}
		if ok && rec.State == slot.StateMissed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, slot %v, older than the window, has no missed record", latest.Format(time.TimeOnly))
		}
	}
	rdb := srv.Client()
	read := func(from, to time.Time) (states []string) {
		pipe := rdb.Pipeline()
		var cmds []*redis.StringCmd
		for at := from; !at.After(to); at = at.Add(time.Second) {
			cmds = append(cmds, pipe.Get(ctx, slotstore.RecordKey(store.Prefix(), "j", at)))
		}
		pipe.Exec(ctx)
		for _, c := range cmds {
			states = append(states, c.Val())
		}
		return states
	}
	// A second of margin at the oldest end: the replica's start is after
	// before, so its first recorded slot may be a second later.
	bad := 0
	recorded := read(oldest.Add(time.Second), latest)
	for i, v := range recorded {
		if !strings.HasPrefix(v, string(slot.StateMissed)+" ") || !strings.Contains(v, "older than the catch-up window") {
			if bad++; bad <= 3 {
				t.Errorf("slot %v: record %q; want missed, older than the window", oldest.Add(time.Duration(i+1)*time.Second).Format(time.TimeOnly), v)
			}
		}
	}
	for i, v := range read(down.Add(time.Second), oldest.Add(-time.Second)) {
		if v != "" {
			if bad++; bad <= 6 {
				t.Errorf("slot %v, older than the retention: record %q; want none", down.Add(time.Duration(i+1)*time.Second).Format(time.TimeOnly), v)
			}
		}
	}
	if bad > 0 || len(recorded) < 7000 {
		t.Fatalf("%d slots wrong of %d", bad, len(recorded))
	}
	t.Logf("%d slots older than the window recorded missed in %v", len(recorded), time.Since(before).Round(time.Millisecond))
}

// seedDone records the slot of job at at done, run by a replica "before":
// the job's last slot, which a start plans from.
func seedDone(t *testing.T, store *slotstore.Store, job scheduler.Job, at time.Time) {
	t.Helper()
	ctx := context.Background()
	res, err := store.Claim(ctx, []slot.Claim{{Kind: slot.ClaimLive, Job: job.Name, Slot: at, Replica: "before",
		LeaseTTL: job.LeaseTTL, Retention: job.Retention, Deadline: time.Now().Add(time.Minute)}})
	if err != nil || res[0].Outcome != slot.OutcomeWon {
		t.Fatalf("seed: %+v %v", res, err)
	}
	if errs := store.Finish(ctx, []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}}); errs[0] != nil {
		t.Fatalf("seed: finish: %v", errs[0])
	}
}

package scheduler_test

import (
	"context"
	"log/slog"
	"slices"
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
	job := scheduler.Job{Name: "j", Schedule: "@every 1s", CatchupWindow: 48 * time.Hour, Retention: 49 * time.Hour, LeaseTTL: time.Second}
	// The job's last slot ran 30 hours ago.
	down := time.Now().Add(-30 * time.Hour).Truncate(time.Second)
	res, err := store.Claim(ctx, []slot.Claim{{Kind: slot.ClaimLive, Job: "j", Slot: down, Replica: "before",
		LeaseTTL: time.Second, Retention: 49 * time.Hour, Deadline: time.Now().Add(time.Minute)}})
	if err != nil || res[0].Outcome != slot.OutcomeWon {
		t.Fatalf("seed: %+v %v", res, err)
	}
	store.Finish(ctx, []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}})

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

	// Slots within max_skew of the start are claimed live; catchup last runs
	// the latest before them. The slots between are recorded missed, oldest
	// first: the last of them is recorded last. Wait for it (bounded: a busy
	// machine is slower, a cut-off plan never records it).
	latest := start.Add(-100 * time.Millisecond).Truncate(time.Second)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, ok, err := store.Record(ctx, "j", latest.Add(-time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		ran := slices.ContainsFunc(runs, latest.Equal)
		mu.Unlock()
		if ok && ran {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes: the last missed slot has a record: %v; the latest ran: %v", ok, ran)
		}
	}
	mu.Lock()
	for _, at := range runs {
		if at.Before(latest) {
			t.Errorf("slot %s ran, older than the latest missed one: catchup last runs only that", at.Format(time.TimeOnly))
		}
	}
	mu.Unlock()
	// Every slot between the last run and the latest has a missed record.
	rdb := srv.Client()
	n, bad := 0, 0
	var firstBad time.Time
	for at := down.Add(time.Second); at.Before(latest); {
		pipe := rdb.Pipeline()
		var cmds []*redis.StringCmd
		var slots []time.Time
		for k := 0; k < 10000 && at.Before(latest); k, at = k+1, at.Add(time.Second) {
			cmds = append(cmds, pipe.HGet(ctx, slotstore.RecordKey(store.Prefix(), "j", at), "state"))
			slots = append(slots, at)
		}
		pipe.Exec(ctx)
		for i, c := range cmds {
			n++
			if c.Val() != string(slot.StateMissed) {
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

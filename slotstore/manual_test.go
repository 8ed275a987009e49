package slotstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

func manual(job, id, replica string) slot.Claim {
	c := live(job, time.Unix(1_700_005_000, 0), replica)
	c.Kind, c.Deadline = slot.ClaimManual, time.Time{}
	c.Manual = &slot.Manual{ID: id, By: "ops@host", Note: "redo the draw"}
	return c
}

// TestManualSlots: a manual slot is a slot of its own, beside the scheduled
// slot of the same second. Asking for it again (same ID) finds its record
// and runs nothing; the job's overlap policy applies between it and a
// scheduled run; it is recorded, finished, listed and settled like any slot.
func TestManualSlots(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_005_000, 0)

	won := claimOne(t, s, manual("m", "key-1", "r1"))
	if won.Outcome != slot.OutcomeWon || won.Lease.RunID() == "" {
		t.Fatalf("manual claim: %+v", won)
	}
	for _, r := range []string{"r1", "r2"} {
		if again := claimOne(t, s, manual("m", "key-1", r)); again.Outcome != slot.OutcomeLost || again.State != slot.StateRunning || again.Holder != "r1" {
			t.Fatalf("the same manual slot asked again by %s: %+v", r, again)
		}
	}
	// The scheduled slot of the same second is another slot: overlap skip
	// records it skipped, naming the manual run that holds the job.
	sched := claimOne(t, s, live("m", at, "r2"))
	if sched.Outcome != slot.OutcomeSkipped || sched.HolderManual != "key-1" || !sched.HolderSlot.IsZero() {
		t.Fatalf("scheduled slot while the manual run holds the job: %+v", sched)
	}
	if holder, hs, _, err := s.Holder(ctx, "m"); err != nil || holder != "r1" || !hs.IsZero() {
		t.Fatalf("Holder = %q %v %v", holder, hs, err)
	}
	states, err := s.JobStates(ctx, []string{"m"})
	if err != nil || len(states["m"].RunningManual) != 1 || states["m"].RunningManual[0] != "key-1" || len(states["m"].Running) != 0 {
		t.Fatalf("JobStates = %+v, %v", states, err)
	}
	if !states["m"].Last.Equal(at) {
		t.Fatalf("the high-water mark is %v: only scheduled slots move it (want %v)", states["m"].Last, at)
	}
	// A second manual slot, under overlap skip, is skipped too.
	if r := claimOne(t, s, manual("m", "key-2", "r2")); r.Outcome != slot.OutcomeSkipped || r.HolderManual != "key-1" {
		t.Fatalf("a second manual slot while the first runs: %+v", r)
	}
	if err := s.Finish(ctx, []slot.FinishRequest{{Lease: won.Lease, State: slot.StateDone, Result: "7 winners"}})[0]; err != nil {
		t.Fatal(err)
	}
	rec, ok, err := s.ManualRecord(ctx, "m", "key-1")
	if err != nil || !ok || rec.State != slot.StateDone || rec.Owner != "r1" || rec.Result != "7 winners" || rec.Manual == nil ||
		rec.Manual.ID != "key-1" || rec.Manual.By != "ops@host" || rec.Manual.Note != "redo the draw" || rec.Slot.IsZero() || rec.RunID != won.Lease.RunID() {
		t.Fatalf("ManualRecord = %+v %+v, %v, %v", rec, rec.Manual, ok, err)
	}
	if again := claimOne(t, s, manual("m", "key-1", "r3")); again.Outcome != slot.OutcomeLost || again.State != slot.StateDone {
		t.Fatalf("the same manual slot after its run: %+v", again)
	}
	if states, _ := s.JobStates(ctx, []string{"m"}); len(states["m"].RunningManual) != 0 {
		t.Fatalf("a finished manual slot is still running: %+v", states["m"])
	}
	if sched, ok, _ := s.Record(ctx, "m", at); !ok || sched.State != slot.StateSkipped || sched.Manual != nil || !strings.Contains(sched.Error, "the run of manual slot key-1 on r1") {
		t.Fatalf("the scheduled slot's record: %+v", sched)
	}
	recs, err := s.Records(ctx, "m", 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("Records = %d records, %v", len(recs), err)
	}
	manuals := 0
	for _, r := range recs {
		if r.Manual != nil {
			manuals++
		}
	}
	if manuals != 2 {
		t.Fatalf("Records lists %d manual slots, want 2: %+v", manuals, recs)
	}

	// A manual run whose owner dies is settled by a takeover, like any slot.
	dying := claimOne(t, s, manual("m", "key-3", "dies"))
	if dying.Outcome != slot.OutcomeWon {
		t.Fatalf("%+v", dying)
	}
	to := takeover("m", time.Now(), "r2", true, 3)
	to.Manual = &slot.Manual{ID: "key-3"}
	if r := claimOne(t, s, to); r.Outcome != slot.OutcomeAlive {
		t.Fatalf("takeover while the owner holds its lease: %+v", r)
	}
	lapse(t, rdb, s, "m", "lease")
	second := claimOne(t, s, to)
	if second.Outcome != slot.OutcomeWon || second.Attempt != 2 || second.Fence <= dying.Fence {
		t.Fatalf("takeover of the manual slot: %+v", second)
	}
	if errs := s.Renew(ctx, []slot.Lease{dying.Lease}); !errors.Is(errs[0], slot.ErrLeaseLost) {
		t.Fatalf("old owner's renew: %v", errs[0])
	}
	if errs := s.Renew(ctx, []slot.Lease{second.Lease}); errs[0] != nil {
		t.Fatalf("new owner's renew: %v", errs[0])
	}
	if err := finish(s, second.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := s.ManualRecord(ctx, "m", "key-3"); rec.Attempt != 2 || rec.Owner != "r2" || rec.State != slot.StateDone {
		t.Fatalf("record %+v", rec)
	}

	// One recorded abandoned says the slot's time as its record has it: the
	// takeover was sent with the watcher's time.
	if r := claimOne(t, s, manual("m", "key-4", "dies")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("%+v", r)
	}
	lapse(t, rdb, s, "m", "lease")
	to = takeover("m", time.Now().Add(time.Hour), "r2", false, 1)
	to.Manual = &slot.Manual{ID: "key-4"}
	ab := claimOne(t, s, to)
	rec, _, err = s.ManualRecord(ctx, "m", "key-4")
	if err != nil || ab.Outcome != slot.OutcomeAbandoned || rec.State != slot.StateAbandoned || !ab.Slot.Equal(rec.Slot) {
		t.Fatalf("takeover %+v of a manual slot whose record is %+v, %v; want abandoned at the record's slot", ab, rec, err)
	}
}

// TestManualSlotsOverlapAllow: with overlap allowed, a manual slot runs beside
// the scheduled run, under its own lease.
func TestManualSlotsOverlapAllow(t *testing.T) {
	_, _, s := newSlots(t)
	sched := live("a", time.Unix(1_700_005_000, 0), "r1")
	sched.AllowOverlap = true
	if r := claimOne(t, s, sched); r.Outcome != slot.OutcomeWon {
		t.Fatalf("%+v", r)
	}
	m := manual("a", "k", "r2")
	m.AllowOverlap = true
	r := claimOne(t, s, m)
	if r.Outcome != slot.OutcomeWon {
		t.Fatalf("manual slot beside a scheduled run, overlap allowed: %+v", r)
	}
	if err := finish(s, r.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
}

// TestManualSlotsArePaused: a paused job records a manual slot paused too.
func TestManualSlotsArePaused(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	if _, _, err := s.Pause(ctx, "p", "freeze", "ops@host"); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, manual("p", "k", "r1")); r.Outcome != slot.OutcomePaused {
		t.Fatalf("manual claim of a paused job: %+v", r)
	}
	rec, ok, _ := s.ManualRecord(ctx, "p", "k")
	if !ok || rec.State != slot.StatePaused || rec.Manual == nil || rec.Manual.Note != "redo the draw" {
		t.Fatalf("record %+v", rec)
	}
}

func TestManualClaimsAreChecked(t *testing.T) {
	_, _, s := newSlots(t)
	bad := map[string]slot.Claim{}
	c := manual("m", "k", "r1")
	c.Manual = nil
	bad["no Manual"] = c
	c = manual("m", "with space", "r1")
	bad["bad ID"] = c
	c = manual("m", strings.Repeat("k", slot.MaxManualID+1), "r1")
	bad["long ID"] = c
	c = manual("m", "k", "r1")
	c.Manual.Note = strings.Repeat("n", slot.MaxNote+1)
	bad["long note"] = c
	c = manual("m", "k", "r1")
	c.Manual.By = strings.Repeat("b", slot.MaxNote+1)
	bad["long by"] = c
	c = live("m", time.Now(), "r1")
	c.Manual = &slot.Manual{ID: "k"}
	bad["live claim with Manual"] = c
	for name, c := range bad {
		if _, err := s.Claim(context.Background(), []slot.Claim{c}); err == nil {
			t.Errorf("%s: Claim took it", name)
		}
	}
}

// TestPeek: a plain read of the slots' records, for hedged claims: the
// state and owner where there is a record, a zero Record where there is
// none, for scheduled and manual slots alike.
func TestPeek(t *testing.T) {
	_, _, s := newSlots(t)
	at := time.Unix(1_700_006_000, 0)
	claimOne(t, s, live("pk", at, "r1"))
	claimOne(t, s, manual("pk2", "k", "r2"))
	recs, err := s.Peek(context.Background(), []slot.Claim{live("pk", at, "r3"), live("pk", at.Add(time.Second), "r3"), manual("pk2", "k", "r3")})
	if err != nil || len(recs) != 3 {
		t.Fatalf("Peek = %+v, %v", recs, err)
	}
	if recs[0].State != slot.StateRunning || recs[0].Owner != "r1" || recs[1].State != "" || recs[2].State != slot.StateRunning || recs[2].Owner != "r2" {
		t.Fatalf("Peek = %+v", recs)
	}
}

// everySeventh is a store under prefix on a Redis of its own, whose round
// trips trips counts, with the slot at at of each of 600 jobs, j0 to j599,
// every 7th claimed by r1; and those 600 slots' claims as r2 sends them.
func everySeventh(t *testing.T, prefix string, at time.Time) (*redis.Client, *pipelineCounter, *slotstore.Store, []slot.Claim) {
	t.Helper()
	rdb := redistest.StartOwned(t).Client()
	trips := &pipelineCounter{}
	rdb.AddHook(trips)
	s, err := slotstore.New(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var claims, theirs []slot.Claim
	for i := range 600 {
		c := live(fmt.Sprintf("j%d", i), at, "r1")
		if i%7 == 0 {
			claims = append(claims, c)
		}
		c.Replica = "r2"
		theirs = append(theirs, c)
	}
	if _, err := s.Claim(context.Background(), claims); err != nil {
		t.Fatal(err)
	}
	return rdb, trips, s, theirs
}

// TestPeekIsChunked: a peek of 600 slots is one round trip of three MGETs
// (at most 256 keys each: an MGET of a hedging replica's 8,000 took Redis
// 9 ms), and each slot reads as its own record.
func TestPeekIsChunked(t *testing.T) {
	rdb, trips, s, peeks := everySeventh(t, "peek", time.Unix(1_700_007_000, 0))
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := trips.n.Load()
	recs, err := s.Peek(ctx, peeks)
	if err != nil {
		t.Fatal(err)
	}
	if n := trips.n.Load() - before; n != 1 {
		t.Fatalf("a peek of 600 slots took %d round trips, want 1", n)
	}
	stats, _ := rdb.Info(ctx, "commandstats").Result()
	if !strings.Contains(stats, "cmdstat_mget:calls=3,") {
		t.Fatalf("a peek of 600 slots: want 3 MGETs, INFO commandstats says %q", stats)
	}
	for i, r := range recs {
		if want := i%7 == 0; want != (r.State == slot.StateRunning && r.Owner == "r1") || r.Job != peeks[i].Job {
			t.Fatalf("slot %d (%s) reads %+v", i, peeks[i].Job, r)
		}
	}
}

// refsOf names the claims' slots.
func refsOf(claims []slot.Claim) []slot.Ref {
	refs := make([]slot.Ref, len(claims))
	for i, c := range claims {
		refs[i] = slot.Ref{Job: c.Job, At: c.Slot}
	}
	return refs
}

// TestMissing: a backstop's look at 600 slots, every 7th with a record and
// one with a protocol-1 record (a hash), finds the others missing. When
// every slot has a record it is one round trip of three EXISTS (256 keys at
// most each, answered with a count) and finds none; a group short of
// records is looked at again key by key, and only it.
func TestMissing(t *testing.T) {
	at := time.Unix(1_700_008_000, 0)
	rdb, trips, s, looks := everySeventh(t, "miss", at)
	ctx := context.Background()
	if err := rdb.HSet(ctx, slotstore.RecordKey("miss", "j599", at), "state", "done").Err(); err != nil {
		t.Fatal(err)
	}
	missing, err := s.Missing(ctx, refsOf(looks))
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i := range 600 {
		if i%7 != 0 && i != 599 {
			want = append(want, i)
		}
	}
	if !slices.Equal(missing, want) {
		t.Fatalf("Missing = %v, want %v", missing, want)
	}
	// Every slot recorded but one, in the last group of keys.
	var rest []slot.Claim
	for _, i := range want[:len(want)-1] {
		rest = append(rest, looks[i])
	}
	if _, err := s.Claim(ctx, rest); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := trips.n.Load()
	if missing, err := s.Missing(ctx, refsOf(looks)); err != nil || !slices.Equal(missing, want[len(want)-1:]) {
		t.Fatalf("Missing = %v, %v; want [%d]", missing, err, want[len(want)-1])
	}
	n := trips.n.Load() - before
	stats, _ := rdb.Info(ctx, "commandstats").Result()
	if n != 2 || !strings.Contains(stats, fmt.Sprintf("cmdstat_exists:calls=%d,", 3+600-512)) {
		t.Fatalf("a look at 600 slots, one missing in the last 88: %d round trips and %q; want 2, and 3+88 EXISTS", n, stats)
	}
	// All recorded: one round trip, three EXISTS.
	claimOne(t, s, looks[want[len(want)-1]])
	before = trips.n.Load()
	if missing, err := s.Missing(ctx, refsOf(looks)); err != nil || len(missing) != 0 || trips.n.Load()-before != 1 {
		t.Fatalf("Missing with every slot recorded = %v, %v in %d round trips; want none, in 1", missing, err, trips.n.Load()-before)
	}
}

// TestRunning: Running lists, per job, the slots its state lists running:
// a scheduled slot still running (not one that has finished), a manual
// slot by its ID; a job with none, or with no state at all, is left out.
func TestRunning(t *testing.T) {
	_, _, s := newSlots(t)
	at := time.Unix(1_700_009_000, 0)
	done := claimOne(t, s, live("ra", at, "r1"))
	if err := finish(s, done.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	claimOne(t, s, live("ra", at.Add(time.Second), "r1"))
	claimOne(t, s, manual("rb", "k1", "r2"))
	ended := claimOne(t, s, live("rc", at, "r1"))
	if err := finish(s, ended.Lease, slot.StateFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Running(context.Background(), []string{"ra", "rb", "rc", "never"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got["ra"].Running, []time.Time{at.Add(time.Second)}) || len(got["ra"].RunningManual) != 0 ||
		len(got["rb"].Running) != 0 || !slices.Equal(got["rb"].RunningManual, []string{"k1"}) {
		t.Fatalf("Running = %+v; want ra's slot %v and rb's manual slot k1", got, at.Add(time.Second).Unix())
	}
}

// failAfterFirst fails every command of a pipeline but its first, as a
// connection cut mid-pipeline (or a Cluster master that is down) would.
type failAfterFirst struct{}

func (failAfterFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failAfterFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (failAfterFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds[1:] {
			c.SetErr(errors.New("injected: connection cut"))
		}
		return next(ctx, cmds[:1])
	}
}

// TestRunningFailsWhenAReadFails: a job with no state answers redis.Nil,
// which Running passes over; a read that fails after it makes Running
// fail, not report the job with nothing running (its slots would then go
// unwatched).
func TestRunningFailsWhenAReadFails(t *testing.T) {
	srv, _, s := newSlots(t)
	claimOne(t, s, live("rr", time.Unix(1_700_009_500, 0), "r1"))
	rdb := srv.Client()
	rdb.AddHook(failAfterFirst{})
	cut, err := slotstore.New(rdb, srv.Key("sc"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cut.Running(context.Background(), []string{"never", "rr"}); err == nil {
		t.Fatalf("Running with rr's read failed = %+v, nil; want an error", got)
	}
}

package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// Every slot ends with a record: these tests leave a slot recorded running
// in the ways a review found it could stay so, with no run behind it and
// no replica watching it, and check that it is settled.

// TestFinishTriesUntilRedisAnswers: a lone replica loses Redis while a run
// goes on, for longer than a few tries of its finish. The run's outcome
// must be recorded once Redis is back, not dropped: the slot used to stay
// running for its retention, with nobody to settle it.
func TestFinishTriesUntilRedisAnswers(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1m", LeaseTTL: 3 * time.Second}}
		at := time.Now().Truncate(time.Minute).Add(time.Minute)
		var r atomic.Pointer[replica]
		fn := func(ctx context.Context, run jobs.Run) error {
			if run.Slot.Equal(at) {
				r.Load().net.freeze() // Redis goes away while the job runs
				jobs.SetResult(ctx, "drawn")
			}
			return nil
		}
		r.Store(h.start("solo", registry(t, map[string]jobs.Func{"j": fn}), table))
		sleepUntil(at.Add(40 * time.Second)) // far more than three tries of the finish
		if rec, _ := h.record("j", at.Unix()); rec.State != slot.StateRunning {
			t.Fatalf("slot %v recorded %s while Redis was away", at.UTC(), rec.State)
		}
		r.Load().net.thaw()
		sleepUntil(at.Add(50 * time.Second))
		rec, ok := h.record("j", at.Unix())
		if !ok || rec.State != slot.StateDone || rec.Result != "drawn" || rec.Owner != "solo" {
			t.Errorf("slot %v: %s by %s, result %q, error %q (found %v); want done by solo, with its result",
				at.UTC(), rec.State, rec.Owner, rec.Result, rec.Error, ok)
		}
	})
}

// failFinish fails every Finish while on, as when the finish's round trip
// times out, and lets everything else through.
type failFinish struct {
	*slotstore.Store
	mu sync.Mutex
	on bool
	n  int // finishes failed
}

func (f *failFinish) set(on bool) { f.mu.Lock(); f.on = on; f.mu.Unlock() }

func (f *failFinish) Finish(ctx context.Context, reqs []slot.FinishRequest) []error {
	f.mu.Lock()
	on := f.on
	if on {
		f.n++
	}
	f.mu.Unlock()
	if !on {
		return f.Store.Finish(ctx, reqs)
	}
	errs := make([]error, len(reqs))
	for i := range errs {
		errs[i] = errors.New("failFinish: i/o timeout")
	}
	return errs
}

// TestSweepLeavesAFinishingRunAlone: a run's finish keeps failing for three
// minutes while everything else works. The replica's reads of the running
// slots (every minute) find the slot running after its lease has run out;
// they must leave it to the run that is still recording its outcome, not
// record it abandoned: once the finish gets through, the record says done.
func TestSweepLeavesAFinishingRunAlone(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1m", LeaseTTL: 3 * time.Second}}
		at := time.Now().Truncate(time.Minute).Add(2 * time.Minute)
		var f *failFinish
		fn := func(ctx context.Context, run jobs.Run) error {
			if run.Slot.Equal(at) {
				f.set(true)
			}
			return nil
		}
		h.startWith("solo", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { f = &failFinish{Store: s}; return f }},
			registry(t, map[string]jobs.Func{"j": fn}), table)
		sleepUntil(at.Add(3 * time.Minute))
		rec, _ := h.record("j", at.Unix())
		f.mu.Lock()
		failed := f.n
		f.mu.Unlock()
		if rec.State != slot.StateRunning || failed < 10 {
			t.Fatalf("slot %v after 3 minutes of failing finishes (%d failed): %s %q; want running", at.UTC(), failed, rec.State, rec.Error)
		}
		f.set(false)
		sleepUntil(at.Add(3*time.Minute + 15*time.Second))
		if rec, ok := h.record("j", at.Unix()); !ok || rec.State != slot.StateDone {
			t.Errorf("slot %v: %s by %s %q (found %v); want done", at.UTC(), rec.State, rec.Owner, rec.Error, ok)
		}
	})
}

// TestOwnTakeoverLeavesAFinishingRunAlone: a run outlasts its interval, so
// the next slot is recorded skipped and this replica watches the run's own
// slot (its holder), a takeover queued for when its lease would run out.
// Then the run ends and its finish keeps failing for a minute, past the
// lease. The queued takeover must leave the slot to the finish, not record
// it abandoned: once the finish gets through, the record says done.
func TestOwnTakeoverLeavesAFinishingRunAlone(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 2s", LeaseTTL: 2 * time.Second}}
		at := nextSecond(0).Add(10 * time.Second)
		if at.Unix()%2 != 0 {
			at = at.Add(time.Second)
		}
		var f *failFinish
		fn := func(ctx context.Context, run jobs.Run) error {
			if run.Slot.Equal(at) {
				time.Sleep(3 * time.Second) // the next slot is skipped behind it
				f.set(true)
			}
			return nil
		}
		h.startWith("solo", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { f = &failFinish{Store: s}; return f }},
			registry(t, map[string]jobs.Func{"j": fn}), table)
		sleepUntil(at.Add(time.Minute))
		if rec, _ := h.record("j", at.Unix()+2); rec.State != slot.StateSkipped {
			t.Fatalf("the slot after the long run: %s %q; want skipped (its holder is then watched)", rec.State, rec.Error)
		}
		if rec, _ := h.record("j", at.Unix()); rec.State != slot.StateRunning {
			t.Fatalf("slot %v after a minute of failing finishes: %s %q; want running", at.UTC(), rec.State, rec.Error)
		}
		f.set(false)
		sleepUntil(at.Add(time.Minute + 15*time.Second))
		if rec, ok := h.record("j", at.Unix()); !ok || rec.State != slot.StateDone {
			t.Errorf("slot %v: %s by %s %q (found %v); want done", at.UTC(), rec.State, rec.Owner, rec.Error, ok)
		}
	})
}

// TestOneShotsOrphanIsSettled: a backfill (a one-shot, in a process that is
// not in the registry) wins a slot, but every reply of its claims is lost,
// and it gives up on the slot. Nobody runs the slot and no replica learnt
// of it; a live replica must still settle it by its policy (abandon), from
// its reads of the running slots, within about a minute and a lease TTL.
func TestOneShotsOrphanIsSettled(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1m", LeaseTTL: 2 * time.Second}}
		h.start("r1", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}), table)
		time.Sleep(5 * time.Second)
		past := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
		s, err := scheduler.New(loseWhile{Store: h.store}, registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}),
			scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"), scheduler.WithLogger(h.log.logger(0)))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Backfill(context.Background(), "j", []time.Time{past}, 1)
		if err != nil || len(res) != 1 || res[0].Err == nil {
			t.Fatalf("backfill: %+v, %v; want the slot's claim to fail", res, err)
		}
		gaveUp := time.Now()
		if rec, _ := h.record("j", past.Unix()); rec.State != slot.StateRunning || rec.Owner != "cli" {
			t.Fatalf("slot %v after the backfill: %s by %s; want running by cli (its claim won)", past.UTC(), rec.State, rec.Owner)
		}
		sleepUntil(gaveUp.Add(scheduler.RunningSweepEvery*11/10 + 5*time.Second))
		rec, ok := h.record("j", past.Unix())
		if !ok || rec.State != slot.StateAbandoned {
			t.Errorf("slot %v a sweep and a lease TTL after the backfill gave up: %s by %s %q (found %v); want abandoned",
				past.UTC(), rec.State, rec.Owner, rec.Error, ok)
		}
	})
}

// TestStopRecordsTheDeferredMisses: every replica was down for 20 slots;
// one starts (catchup: none) and stops again 5 s later, before the misfire
// grace of those slots has passed, while their miss claims wait for it.
// They must be recorded as it stops: the job's state now holds later slots,
// so the next start would not plan them, and they would keep no record.
func TestStopRecordsTheDeferredMisses(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 2 * time.Second, Catchup: scheduler.CatchupNone}}
		reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}) }
		first := h.start("r1", reg(), table)
		time.Sleep(3 * time.Second)
		first.stop()
		states, err := h.store.JobStates(context.Background(), []string{"j"})
		if err != nil || states["j"].Last.IsZero() {
			t.Fatalf("no slot ran before the stop: %v %v", states, err)
		}
		last := states["j"].Last.Unix()
		sleepUntil(time.Unix(last+20, 0).Add(500 * time.Millisecond))
		again := h.start("r2", reg(), table)
		time.Sleep(5 * time.Second)
		if rec, ok := h.record("j", last+5); ok {
			t.Fatalf("slot %d recorded %s before its misfire grace passed", last+5, rec.State)
		}
		again.stop()
		h.eachSlot("j", "starts", last+1, last+19, func(at int64, r slot.Record, starts int) {
			if r.State != slot.StateMissed || starts != 0 {
				t.Errorf("slot %d, in the outage: %s %q, %d starts; want missed", at, r.State, r.Error, starts)
			}
		})
	})
}

// TestTakeoversGoWhileTheClockIsOff: the only live replica's clock is 10
// minutes off Redis's, so it claims no slot; a replica that died mid-run
// left a slot running. Whether its owner is gone is judged on Redis's
// clock alone, so the takeover must still go, and the slot be settled by
// its policy (abandon), not left running until the clock is set right.
func TestTakeoversGoWhileTheClockIsOff(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1m", LeaseTTL: 2 * time.Second}}
		past := time.Now().Add(-30 * time.Second).Truncate(time.Second)
		res, err := h.store.Claim(context.Background(), []slot.Claim{{Kind: slot.ClaimCatchup, Job: "j", Slot: past, Replica: "dead",
			LeaseTTL: 2 * time.Second, Retention: 24 * time.Hour}})
		if err != nil || res[0].Outcome != slot.OutcomeWon {
			t.Fatalf("the dead replica's claim: %+v, %v", res, err)
		}
		h.startWith("r1", replicaOpts{offset: 10 * time.Minute}, registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}), table)
		time.Sleep(scheduler.RunningSweepEvery*11/10 + 5*time.Second)
		if rec, ok := h.record("j", past.Unix()); !ok || rec.State != slot.StateAbandoned {
			t.Errorf("slot %v, whose owner died, a sweep and a lease TTL later: %s by %s %q (found %v); want abandoned",
				past.UTC(), rec.State, rec.Owner, rec.Error, ok)
		}
	})
}

package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// onTime fails t unless every slot in [from, to) ran once, at its time.
func (l *runLog) onTime(t *testing.T, from, to time.Time) {
	t.Helper()
	for at, r := range l.between(t, from, to) {
		if r.delay != 0 {
			t.Errorf("slot %v started %v late on %s", time.Unix(at, 0).UTC(), r.delay, r.replica)
		}
	}
}

// cutOff cuts the replicas off from Redis half a second before from, and
// gives them back once every slot before to has had two backstops' time to
// start; then waits for the bubble to settle.
func cutOff(cut []*replica, from, to time.Time) {
	sleepUntil(from.Add(-500 * time.Millisecond))
	for _, r := range cut {
		r.net.freeze()
	}
	sleepUntil(to.Add(2 * scheduler.BackstopAfter))
	for _, r := range cut {
		r.net.thaw()
	}
	synctest.Wait()
}

// readLog counts, per replica, the slots whose records it read (Peek: a
// hedger's read) and looked for (Missing: a backstop's look).
type readLog struct {
	mu            sync.Mutex
	peeks, misses map[string]int
}

func newReadLog() *readLog { return &readLog{peeks: map[string]int{}, misses: map[string]int{}} }

func (l *readLog) wrap(s *slotstore.Store) scheduler.Claimer { return readCounter{s, l} }

type readCounter struct {
	*slotstore.Store
	l *readLog
}

func (c readCounter) Peek(ctx context.Context, claims []slot.Claim) ([]slot.Record, error) {
	c.l.mu.Lock()
	for _, cl := range claims {
		if cl.Kind == slot.ClaimLive {
			c.l.peeks[cl.Job+"@"+cl.Slot.UTC().Format(time.RFC3339)]++
		}
	}
	c.l.mu.Unlock()
	return c.Store.Peek(ctx, claims)
}

func (c readCounter) Missing(ctx context.Context, slots []slot.Ref) ([]int, error) {
	c.l.mu.Lock()
	for _, r := range slots {
		c.l.misses[r.Job+"@"+r.At.UTC().Format(time.RFC3339)]++
	}
	c.l.mu.Unlock()
	return c.Store.Missing(ctx, slots)
}

// TestSpreadBoundsTheHedgers: six replicas of a job every second. Each slot
// is claimed by its preferred replica, read a hedge later by the next two
// in its rendezvous order (the hedgers), and only looked for, a backstop
// later, by the other three: two reads of its record and three looks, not
// five reads; and every slot runs once, on time.
func TestSpreadBoundsTheHedgers(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		reads := newReadLog()
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		for _, id := range []string{"r1", "r2", "r3", "r4", "r5", "r6"} {
			h.startWith(id, replicaOpts{claimer: reads.wrap}, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		}
		from := nextSecond(0).Add(10 * time.Second) // every replica has heartbeated since all started
		to := from.Add(60 * time.Second)
		sleepUntil(to.Add(2 * scheduler.BackstopAfter))
		synctest.Wait()
		l.onTime(t, from, to)
		reads.mu.Lock()
		defer reads.mu.Unlock()
		for at := from; at.Before(to); at = at.Add(time.Second) {
			k := "tick@" + at.UTC().Format(time.RFC3339)
			if reads.peeks[k] != 2 || reads.misses[k] != 3 {
				t.Errorf("slot %s: its record read by %d replicas and looked for by %d; want 2 (its hedgers) and 3 (the rest)", k, reads.peeks[k], reads.misses[k])
			}
		}
	})
}

// TestSpreadBackstopStartsTheSlot: five replicas, four of them cut off
// from Redis at once. Until the registry drops them, the slots for which
// the live one is the preferred replica start on time, those for which it
// is a hedger one hedge late, and those whose preferred replica and both
// hedgers are cut off, one backstop late, on its look for their records:
// every slot starts once, none later than that.
func TestSpreadBackstopStartsTheSlot(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		ids := []string{"r1", "r2", "r3", "r4", "r5"}
		var cut []*replica
		for _, id := range ids {
			r := h.start(id, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
			if id != "r5" {
				cut = append(cut, r)
			}
		}
		from := nextSecond(0).Add(10 * time.Second)
		stale := from.Add(4 * scheduler.DefaultHeartbeatEvery) // dropped, and seen dropped
		to := stale.Add(10 * time.Second)
		cutOff(cut, from, to)
		want := map[int]time.Duration{0: 0, 1: hedge, 2: hedge, 3: scheduler.BackstopAfter, 4: scheduler.BackstopAfter}
		backstopped := 0
		for at, r := range l.between(t, from, to) {
			slotAt := time.Unix(at, 0)
			w := want[scheduler.Rank(ids, "r5", "tick", slotAt)] // or 0, once the registry has dropped the others
			switch {
			case r.replica != "r5":
				t.Errorf("slot %v ran on %s, which was cut off", slotAt.UTC(), r.replica)
			case r.delay > w:
				t.Errorf("slot %v started %v late; want %v at most (r5's place in its order: %d)", slotAt.UTC(), r.delay, w,
					scheduler.Rank(ids, "r5", "tick", slotAt))
			case r.delay > hedge:
				backstopped++
			}
			if !slotAt.Before(stale) && r.delay != 0 {
				t.Errorf("slot %v started %v late, after the registry dropped the cut-off replicas", slotAt.UTC(), r.delay)
			}
		}
		if backstopped == 0 {
			t.Errorf("no slot was started by the backstop: was r5 never last but one or last in a slot's order?")
		}
		t.Logf("%d slots started one backstop late", backstopped)
	})
}

// holdsSlot is a job whose run of the slot at at lasts until its lease is
// lost; its runs of other slots return at once.
func holdsSlot(at time.Time) jobs.Func {
	return func(ctx context.Context, run jobs.Run) error {
		if !run.Slot.Equal(at) {
			return nil
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}
}

// ownerAndHedgersCut starts five replicas of a job due every minute that
// runs until it is cancelled (lease TTL 10s), with opts; once its next
// slot runs, and its hedgers have read its record, it cuts its owner and
// both hedgers (the only replicas that read its record, and so watch it)
// off from Redis. It returns the replicas, the slot's time, the IDs of
// those cut off and of the others.
func ownerAndHedgersCut(t *testing.T, h *harness, opts ...scheduler.Option) (reps map[string]*replica, at time.Time, gone, left []string) {
	t.Helper()
	table := []scheduler.Job{{Name: "long", Schedule: "@every 1m", LeaseTTL: 10 * time.Second}}
	ids := []string{"r1", "r2", "r3", "r4", "r5"}
	at = nextSecond(0).Add(time.Minute).Truncate(time.Minute)
	long := holdsSlot(at)
	reps = map[string]*replica{}
	for _, id := range ids {
		reps[id] = h.start(id, registry(t, map[string]jobs.Func{"long": long}), table, append([]scheduler.Option{scheduler.WithHedge(hedge)}, opts...)...)
	}
	sleepUntil(at.Add(2 * time.Second)) // it runs, and its hedgers have read its record
	synctest.Wait()
	for _, id := range ids {
		if scheduler.Rank(ids, id, "long", at) <= 2 {
			reps[id].net.freeze() // thawed as it stops
			gone = append(gone, id)
		} else {
			left = append(left, id)
		}
	}
	rec, ok := h.record("long", at.Unix())
	if !ok || rec.State != slot.StateRunning || rec.Owner != gone[0] && rec.Owner != gone[1] && rec.Owner != gone[2] {
		t.Fatalf("slot %v before the cut: %+v (%v); want running, on one of %v", at.UTC(), rec, ok, gone)
	}
	return reps, at, gone, left
}

// TestSpreadOwnerLeavesWithItsHedgers: five replicas of a long job. Once a
// slot runs, its owner and both of its hedgers (the only replicas that
// read its record, and so watch it) are cut off from Redis. When the
// registry drops them, the two left read every job's state again, find the
// slot still running, and settle it once the owner's lease has run out:
// it ends abandoned, not running with nobody to look at it.
func TestSpreadOwnerLeavesWithItsHedgers(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		_, at, gone, _ := ownerAndHedgersCut(t, h)
		// Dropped after three heartbeats, seen dropped at the next, then
		// one lease TTL and a watch.
		sleepUntil(at.Add(2*time.Second + 4*scheduler.DefaultHeartbeatEvery + 10*time.Second + 5*time.Second))
		synctest.Wait()
		if rec, _ := h.record("long", at.Unix()); rec.State != slot.StateAbandoned {
			t.Errorf("slot %v after its owner and hedgers (%v) left: %s by %s; want abandoned by one of the others", at.UTC(), gone, rec.State, rec.Owner)
		}
	})
}

// TestSpreadHedgersDropOutForSkew: five replicas of a long job. Once a slot
// runs, both of its hedgers' clocks step 10s ahead, past max_skew: they
// refuse to claim from then on, takeovers included, but stay in the
// registry. Then the owner is cut off from Redis. The other two replicas,
// which saw the hedgers stop being candidates, watch the slot, and settle
// it once the owner's lease has run out: before the registry could drop the
// owner (three heartbeats of 10s), which would have made them look too.
func TestSpreadHedgersDropOutForSkew(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "long", Schedule: "@every 1m", LeaseTTL: 5 * time.Second}}
		ids := []string{"r1", "r2", "r3", "r4", "r5"}
		at := nextSecond(0).Add(time.Minute).Truncate(time.Minute)
		long := holdsSlot(at)
		reps := map[string]*replica{}
		for _, id := range ids {
			reps[id] = h.start(id, registry(t, map[string]jobs.Func{"long": long}), table, scheduler.WithHedge(hedge),
				scheduler.WithHeartbeatEvery(10*time.Second), scheduler.WithClockCheckEvery(time.Second))
		}
		sleepUntil(at.Add(2 * time.Second)) // it runs, and its hedgers have read its record
		synctest.Wait()
		var owner string
		for _, id := range ids {
			switch scheduler.Rank(ids, id, "long", at) {
			case 0:
				owner = id
			case 1, 2:
				reps[id].clock.step(10 * time.Second)
			}
		}
		if rec, ok := h.record("long", at.Unix()); !ok || rec.State != slot.StateRunning || rec.Owner != owner {
			t.Fatalf("slot %v: %+v (%v); want running on its preferred replica %s", at.UTC(), rec, ok, owner)
		}
		// The hedgers measure their offset within a second and publish it at
		// their next heartbeat; the others see it at theirs.
		cut := at.Add(2*time.Second + 25*time.Second)
		sleepUntil(cut)
		reps[owner].net.freeze()
		defer reps[owner].net.thaw()
		// The owner's lease runs out within 5s of the cut, and its entry
		// goes stale 30s after its last heartbeat, 20s after the cut at
		// the earliest.
		sleepUntil(cut.Add(15 * time.Second))
		synctest.Wait()
		if rec, _ := h.record("long", at.Unix()); rec.State != slot.StateAbandoned {
			t.Errorf("slot %v, 15s after its owner %s was cut off, its hedgers past max_skew: %s by %s; want abandoned by one of the other two",
				at.UTC(), owner, rec.State, rec.Owner)
		}
	})
}

// failingLooks is a store whose backstop looks all fail, and which counts
// the live claims it sends, by slot.
type failingLooks struct {
	*slotstore.Store
	mu     sync.Mutex
	claims map[int64]int
}

func (f *failingLooks) Missing(context.Context, []slot.Ref) ([]int, error) {
	return nil, errors.New("injected: the look timed out")
}

func (f *failingLooks) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	f.mu.Lock()
	for _, c := range claims {
		if c.Kind == slot.ClaimLive {
			f.claims[c.Slot.Unix()]++
		}
	}
	f.mu.Unlock()
	return f.Store.Claim(ctx, claims)
}

// TestSpreadBackstopWhoseLookFails: five healthy replicas, one of which
// cannot look for its backstop slots' records (the look fails). It falls
// back to reading each slot's record, as a hedger does, and claims none of
// them, since each has one: a failed look does not turn into a claim per
// slot against a Redis that is already slow. Every slot runs once, on time.
func TestSpreadBackstopWhoseLookFails(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		ids := []string{"r1", "r2", "r3", "r4", "r5"}
		fl := &failingLooks{claims: map[int64]int{}}
		for _, id := range ids {
			ro := replicaOpts{}
			if id == "r5" {
				ro.claimer = func(s *slotstore.Store) scheduler.Claimer { fl.Store = s; return fl }
			}
			h.startWith(id, ro, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		}
		from := nextSecond(0).Add(10 * time.Second)
		to := from.Add(30 * time.Second)
		sleepUntil(to.Add(2 * scheduler.BackstopAfter))
		synctest.Wait()
		l.onTime(t, from, to)
		fl.mu.Lock()
		defer fl.mu.Unlock()
		backstopped := 0
		for at := from; at.Before(to); at = at.Add(time.Second) {
			n := scheduler.Rank(ids, "r5", "tick", at)
			if n > 2 {
				backstopped++
			}
			if n > 0 && fl.claims[at.Unix()] != 0 {
				t.Errorf("slot %v: r5 (place %d in its order) sent %d claims; want none: it has a record", at.UTC(), n, fl.claims[at.Unix()])
			}
		}
		if backstopped == 0 {
			t.Errorf("r5 backed up no slot: the test shows nothing")
		}
	})
}

// TestSpreadOwnerLeavesWithItsHedgersAfterAStep: as
// TestSpreadOwnerLeavesWithItsHedgers, but the clocks of the two replicas
// left step an hour ahead after the cut, before the registry drops the
// three. The loop measures the step before it handles the departure: noted
// "now" on the stepped clock, the read of every job's state would be due an
// hour ahead of Redis's clock, where the runner goes once it has measured
// the step, and the slot would wait for the next departure (the two
// stepped replicas dropping out of each other's candidates, a heartbeat
// later). Takeovers go on while a replica's clock is off: Redis's clock
// decides whether the owner's lease has run out.
func TestSpreadOwnerLeavesWithItsHedgersAfterAStep(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		// Probed each minute only (just before the slot): the step is
		// measured by the loop, not by the clock loop.
		reps, at, gone, left := ownerAndHedgersCut(t, h, scheduler.WithClockCheckEvery(time.Minute))
		// After the first periodic read of the running slots (at most 66s
		// after the start), and with nothing due on the two left before
		// the registry drops the three: 15s after their last heartbeat (at
		// the slot's time), seen at the others' heartbeat then. The owner's
		// lease has run out by then (10s).
		sleepUntil(at.Add(8 * time.Second))
		for _, id := range left {
			reps[id].clock.step(time.Hour)
		}
		dropped := at.Add(3 * scheduler.DefaultHeartbeatEvery)
		sleepUntil(dropped.Add(scheduler.DefaultHeartbeatEvery / 2)) // a watch settles it within a second; the next departure is a heartbeat later
		synctest.Wait()
		if rec, _ := h.record("long", at.Unix()); rec.State != slot.StateAbandoned {
			t.Errorf("slot %v, %v after its owner and hedgers (%v) dropped out of the registry, the others' clocks stepped: %s by %s; want abandoned by one of %v",
				at.UTC(), scheduler.DefaultHeartbeatEvery/2, gone, rec.State, rec.Owner, left)
		}
	})
}

// failedReads is a store whose reads of records (Peek) all fail, as when
// their replies are lost.
type failedReads struct{ *slotstore.Store }

func (failedReads) Peek(context.Context, []slot.Claim) ([]slot.Record, error) {
	return nil, errors.New("the read's reply was lost")
}

// TestAHedgersFailedReadStillClaims: three replicas of a job every
// second, every read of a record failing, and one replica cut off from
// Redis. Its slots are still started, one hedge late, by a hedger: a read
// that fails sends the claim, which decides. The others' slots start on
// time, and every slot starts once.
func TestAHedgersFailedReadStillClaims(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		ids := []string{"r1", "r2", "r3"}
		var cut *replica
		for _, id := range ids {
			r := h.startWith(id, replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { return failedReads{s} }},
				registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
			if id == "r1" {
				cut = r
			}
		}
		from := nextSecond(0).Add(10 * time.Second)         // every replica has heartbeated since all started
		to := from.Add(2 * scheduler.DefaultHeartbeatEvery) // before the registry drops r1
		cutOff([]*replica{cut}, from, to)
		hedged := 0
		for at, r := range l.between(t, from, to) {
			slotAt := time.Unix(at, 0)
			switch {
			case r.replica == "r1":
				t.Errorf("slot %v ran on r1, which was cut off", slotAt.UTC())
			case scheduler.Rank(ids, "r1", "tick", slotAt) == 0:
				hedged++
				if r.delay > hedge {
					t.Errorf("slot %v, r1's, started %v late on %s; want a hedge (%v) at most", slotAt.UTC(), r.delay, r.replica, hedge)
				}
			case r.delay != 0:
				t.Errorf("slot %v started %v late on %s, its preferred replica", slotAt.UTC(), r.delay, r.replica)
			}
		}
		if hedged == 0 {
			t.Error("r1 was the preferred replica of no slot while it was cut off: the test proves nothing")
		}
		t.Logf("%d slots of r1's started one hedge late", hedged)
	})
}

// failedLooks is a store whose looks for records (Missing, a backstop's)
// all fail, as when their replies are lost.
type failedLooks struct{ *slotstore.Store }

func (failedLooks) Missing(context.Context, []slot.Ref) ([]int, error) {
	return nil, errors.New("the look's reply was lost")
}

// TestABackstopsFailedLookStillClaims: four replicas of a job every
// second, three of them cut off from Redis at once, and every look of the
// fourth's for records failing. The slots for which it is neither the
// preferred replica nor a hedger (each slot has one backstop among four
// replicas) still start, one backstop late: a look that fails reads each
// slot's record and claims those with none. Every slot starts once.
func TestABackstopsFailedLookStillClaims(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		ids := []string{"r1", "r2", "r3", "r4"}
		var cut []*replica
		for _, id := range ids {
			ro := replicaOpts{}
			if id == "r4" {
				ro.claimer = func(s *slotstore.Store) scheduler.Claimer { return failedLooks{s} }
			}
			r := h.startWith(id, ro, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
			if id != "r4" {
				cut = append(cut, r)
			}
		}
		from := nextSecond(0).Add(10 * time.Second)         // every replica has heartbeated since all started
		to := from.Add(2 * scheduler.DefaultHeartbeatEvery) // before the registry drops them
		cutOff(cut, from, to)
		backstopped := 0
		for at, r := range l.between(t, from, to) {
			slotAt := time.Unix(at, 0)
			want := hedge
			switch scheduler.Rank(ids, "r4", "tick", slotAt) {
			case 0:
				want = 0
			case 3:
				want = scheduler.BackstopAfter
				backstopped++
			}
			if r.replica != "r4" {
				t.Errorf("slot %v ran on %s, which was cut off", slotAt.UTC(), r.replica)
			} else if r.delay > want {
				t.Errorf("slot %v started %v late; want %v at most (r4's place in its order: %d)", slotAt.UTC(), r.delay, want,
					scheduler.Rank(ids, "r4", "tick", slotAt))
			}
		}
		if backstopped == 0 {
			t.Error("r4 backed up no slot while the others were cut off: the test proves nothing")
		}
		t.Logf("%d slots started one backstop late", backstopped)
	})
}

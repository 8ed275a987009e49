package scheduler_test

// Replicas that start on a clock off Redis's by more than max_skew: they
// refuse to claim, and must plan on Redis's clock, not their own.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// stepOnRead steps a replica's clock as the replica reads the jobs' states
// at its start: after it has measured its clock against Redis, before it
// plans (an NTP step at boot).
type stepOnRead struct {
	*slotstore.Store
	clock *stepClock
	step  time.Duration
	once  sync.Once
}

func (s *stepOnRead) JobStates(ctx context.Context, names []string) (map[string]slot.JobState, error) {
	s.once.Do(func() { s.clock.step(s.step) })
	return s.Store.JobStates(ctx, names)
}

// TestAStartOnAClockAheadDecidesNothing: a replica starts with its clock an
// hour ahead of Redis's (max_skew 1s) beside a healthy replica; 20 s later
// its clock is set right, and 20 s after that the healthy replica stops.
// The replica must not take the next hour's slots for past ones: no catch-up
// claim of a slot still to come (once its clock is set right, one would win
// that slot an hour early, and the healthy replica's claim would lose it),
// no miss recorded ahead of time. Every slot runs once, on time: on the
// healthy replica, then, once the healthy one has stopped, on this one,
// whose next slot is Redis's next, not its clock's. Its clock is stepped
// either before it starts, or as it starts (after it has measured its
// clock, before it plans).
func TestAStartOnAClockAheadDecidesNothing(t *testing.T) {
	for _, asItStarts := range []bool{false, true} {
		name := "stepped before the start"
		if asItStarts {
			name = "stepped as it starts"
		}
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				key := "starts"
				skew := scheduler.WithSkewLimits(500*time.Millisecond, time.Second)
				table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", Catchup: scheduler.CatchupLast, LeaseTTL: time.Second}}
				reg := func() *jobs.Registry {
					return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 10*time.Millisecond)})
				}
				healthy := h.start("healthy", reg(), table, skew)
				first := nextSecond(500 * time.Millisecond)
				sleepUntil(first.Add(2500 * time.Millisecond))
				clock := newStepClock(0)
				ro := replicaOpts{clock: clock}
				if asItStarts {
					ro.claimer = func(s *slotstore.Store) scheduler.Claimer {
						return &stepOnRead{Store: s, clock: clock, step: time.Hour}
					}
				} else {
					clock.step(time.Hour)
				}
				h.startWith("ahead", ro, reg(), table, skew)
				time.Sleep(20 * time.Second)
				clock.step(-time.Hour) // set right
				time.Sleep(20 * time.Second)
				healthy.stop()
				time.Sleep(20 * time.Second)
				end := time.Now().Truncate(time.Second)

				h.eachSlot("j", key, first.Unix(), end.Unix(), func(at int64, r slot.Record, starts int) {
					d := r.Started.Sub(time.Unix(at, 0))
					switch {
					case r.State != slot.StateDone || starts != 1:
						t.Errorf("slot %s: %s by %s %q, %d starts; want done once", clockOf(at), r.State, r.Owner, r.Error, starts)
					case d < 0:
						t.Errorf("slot %s started %v before its time, on %s", clockOf(at), -d, r.Owner)
					case d > 100*time.Millisecond:
						t.Errorf("slot %s started %v after its time, on %s", clockOf(at), d, r.Owner)
					}
				})
				for at := end.Unix() + 1; at < end.Unix()+3700; at++ {
					if rec, ok := h.record("j", at); ok {
						t.Fatalf("slot %s, still to come, already has a record: %s by %s %q", clockOf(at), rec.State, rec.Owner, rec.Error)
					}
				}
			})
		})
	}
}

// TestAStartOnAClockBehindCatchesUpOnceSetRight: every replica was down
// for 5 slots; one starts with its clock an hour behind Redis's (max_skew
// 1s), so it refuses to claim, and 10 s later its clock is set right. The
// 5 slots of the outage are Redis's past, whatever its clock says: they
// must be caught up by the job's policy (catchup: all) once it claims, not
// taken for slots an hour ahead, nor claimed live and recorded missed once
// its clock is set right. The slots it refused meanwhile end recorded
// missed (by Redis, once their misfire grace has passed), and after the
// clock is set right every slot runs once, on time.
func TestAStartOnAClockBehindCatchesUpOnceSetRight(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const key, down = "starts", 5
		skew := scheduler.WithSkewLimits(500*time.Millisecond, time.Second)
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", Catchup: scheduler.CatchupAll, MisfireGrace: 2 * time.Second, LeaseTTL: time.Second}}
		reg := func() *jobs.Registry {
			return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 10*time.Millisecond)})
		}
		last := h.ranThenStopped("first", reg(), table, 3500*time.Millisecond, skew)
		// At last+down+1.5s, slots last+1..last+down are older than
		// max_skew: the outage.
		sleepUntil(time.Unix(last+down, 0).Add(1500 * time.Millisecond))
		clock := newStepClock(-time.Hour)
		h.startWith("late", replicaOpts{clock: clock}, reg(), table, skew)
		time.Sleep(10 * time.Second)
		clock.step(time.Hour) // set right
		fixed := time.Now()
		time.Sleep(10 * time.Second)
		end := time.Now().Truncate(time.Second)

		h.eachSlot("j", key, last+1, end.Unix(), func(at int64, r slot.Record, starts int) {
			d := r.Started.Sub(time.Unix(at, 0))
			switch outage, refused := at <= last+down, time.Unix(at, 0).Before(fixed); {
			case outage:
				if r.State != slot.StateDone || starts != 1 {
					t.Errorf("slot %s, in the outage: %s %q, %d starts; want caught up: done once", clockOf(at), r.State, r.Error, starts)
				}
			case refused:
				if r.State != slot.StateMissed || starts != 0 {
					t.Errorf("slot %s, while the clock was off: %s %q, %d starts; want missed", clockOf(at), r.State, r.Error, starts)
				}
			case r.State != slot.StateDone || starts != 1 || d < 0 || d > 100*time.Millisecond:
				t.Errorf("slot %s, after the clock was set right: %s %q, %d starts, started %v from its time; want done once, on time",
					clockOf(at), r.State, r.Error, starts, d)
			}
		})
	})
}

// TestAnOutageIsRecordedWhileEveryReplicaRefuses: every replica was down
// for 20 slots, and both start with their clocks 5 minutes ahead of
// Redis's, past max_skew: they refuse to claim, and their clocks are never
// set right. The outage's slots (catchup: none) must still end recorded
// missed: the claims that record them let Redis decide on its own clock,
// so they go to Redis even while a replica refuses. So must the slots
// after their start (refused), and no slot still to come may be recorded.
func TestAnOutageIsRecordedWhileEveryReplicaRefuses(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const down = 20
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", Catchup: scheduler.CatchupNone, MisfireGrace: 2 * time.Second, LeaseTTL: time.Second}}
		reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}) }
		last := h.ranThenStopped("first", reg(), table, 3500*time.Millisecond)
		sleepUntil(time.Unix(last+down, 0).Add(500 * time.Millisecond))
		for _, id := range []string{"a", "b"} {
			h.startWith(id, replicaOpts{offset: 5 * time.Minute}, reg(), table)
		}
		time.Sleep(15 * time.Second)
		end := time.Now().Add(-3 * time.Second).Truncate(time.Second) // the misfire grace has passed

		h.eachSlot("j", "starts", last+1, end.Unix(), func(at int64, r slot.Record, starts int) {
			if r.State != slot.StateMissed || r.Error == "" || starts != 0 {
				t.Errorf("slot %s (outage until %s): %s %q, %d starts; want missed, with the reason", clockOf(at), clockOf(last+down), r.State, r.Error, starts)
			}
		})
		rec, _ := h.record("j", last+1)
		t.Logf("an outage slot's record: %s: %s", rec.State, rec.Error)
		future := time.Now().Add(time.Second).Unix()
		for at := future; at < future+400; at++ {
			if rec, ok := h.record("j", at); ok {
				t.Fatalf("slot %s, still to come, already has a record: %s by %s %q", clockOf(at), rec.State, rec.Owner, rec.Error)
			}
		}
	})
}

// clockOf formats a slot's unix time as its time of day, UTC.
func clockOf(at int64) string { return time.Unix(at, 0).UTC().Format(time.TimeOnly) }

package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestACatchupGoesOnAfterAStepMidRun: every replica was down for 5 slots
// of a job that runs each minute (catchup: all); one replica restarts and
// catches them up, one run (2s) at a time. While its second catch-up run
// is in flight, its clock steps an hour ahead (max_skew 1s), so it refuses
// to claim; 6s after the step its clock is set right. The run that ends
// on the stepped clock must not queue the next catch-up claim an hour
// ahead of Redis's clock (where the runner goes once it has measured the
// step): the catch-up must go on once the clock is set right, each slot of
// the outage run once, promptly; the next live slot runs once, on time,
// and no slot still to come is recorded.
func TestACatchupGoesOnAfterAStepMidRun(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const key, down = "starts", 5
		skew := scheduler.WithSkewLimits(500*time.Millisecond, time.Second)
		// Probed each minute only: the step is measured by the runner, not
		// by the clock loop, whose next probe comes after the catch-up.
		every := scheduler.WithClockCheckEvery(time.Minute)
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1m", Catchup: scheduler.CatchupAll, LeaseTTL: time.Second}}
		reg := func() *jobs.Registry {
			return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 2*time.Second)})
		}
		last := h.ranThenStopped("first", reg(), table, 90*time.Second, skew, every)
		// At last+5m20s, the 5 slots after last are the outage; the next
		// live slot is 40 s away, after the catch-up.
		restart := time.Unix(last+down*60, 0).Add(20 * time.Second)
		sleepUntil(restart)
		r := h.start("catching-up", reg(), table, skew, every)
		sleepUntil(restart.Add(3 * time.Second)) // the second catch-up run holds the job until about 4 s
		r.clock.step(time.Hour)
		sleepUntil(restart.Add(9 * time.Second))
		r.clock.step(-time.Hour) // set right
		fixed := time.Now()
		live := time.Unix(last+(down+1)*60, 0)
		sleepUntil(live.Add(5 * time.Second))

		// Once set right, the 3 slots left take 3 runs of 2 s, the first
		// claimed within a second (a refused claim is tried each second):
		// all started within 6 s, not an hour.
		count := map[int64]int{}
		for _, s := range h.starts(key) {
			count[s.slot]++
		}
		for at := last + 60; at <= last+down*60; at += 60 {
			rec, ok := h.record("j", at)
			switch {
			case !ok || rec.State != slot.StateDone || count[at] != 1:
				t.Errorf("slot %s, in the outage: %s by %s %q (found %v), %d starts; want caught up: done once",
					clockOf(at), rec.State, rec.Owner, rec.Error, ok, count[at])
			case rec.Started.After(fixed.Add(6 * time.Second)):
				t.Errorf("slot %s started at %s, %v after the clock was set right", clockOf(at),
					rec.Started.UTC().Format("15:04:05.000"), rec.Started.Sub(fixed))
			}
		}
		if rec, ok := h.record("j", live.Unix()); !ok || rec.State != slot.StateDone || count[live.Unix()] != 1 ||
			rec.Started.Before(live) || rec.Started.After(live.Add(100*time.Millisecond)) {
			t.Errorf("live slot %s: %s %q (found %v), %d starts, started at %s; want done once, on time",
				clockOf(live.Unix()), rec.State, rec.Error, ok, count[live.Unix()], rec.Started.UTC().Format("15:04:05.000"))
		}
		future := time.Now().Add(time.Second).Unix()
		for at := future; at < future+3700; at++ {
			if rec, ok := h.record("j", at); ok {
				t.Fatalf("slot %s, still to come, already has a record: %s by %s %q", clockOf(at), rec.State, rec.Owner, rec.Error)
			}
		}
	})
}

// TestATriggerGoesOnAfterAStep: a replica's clock steps an hour ahead
// (max_skew 1s) just before it is triggered, and is set right 3s later.
// The loop measures the step before it queues the trigger's claim: queued
// "now" on the stepped clock, the claim would be due an hour ahead of
// Redis's clock, where the runner goes once it has measured the step, and
// the caller would wait in vain. It is refused while the clock is off, and
// runs once the clock is set right.
func TestATriggerGoesOnAfterAStep(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(200 * time.Millisecond)}
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *"}} // noon: never during the test
		// Probed each minute only: the step is measured by the loop, not by
		// the clock loop.
		r := h.start("a", registry(t, fns), table, scheduler.WithSkewLimits(500*time.Millisecond, time.Second),
			scheduler.WithClockCheckEvery(time.Minute))
		time.Sleep(2 * time.Second) // started, its loop waiting for noon
		r.clock.step(time.Hour)
		asked := time.Now()
		type answer struct {
			got scheduler.Triggered
			err error
		}
		done := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := r.s.Trigger(ctx, "draw", slot.Manual{ID: "after-the-step", By: "ops@host"})
			done <- answer{got, err}
		}()
		time.Sleep(3 * time.Second)
		r.clock.step(-time.Hour) // set right
		fixed := time.Now()
		a := <-done
		if a.err != nil || a.got.Outcome != slot.OutcomeWon {
			t.Fatalf("Trigger asked at %s, clock set right at +%v: %+v, %v; want won", asked.UTC().Format(time.TimeOnly),
				fixed.Sub(asked), a.got, a.err)
		}
		if answered := time.Since(fixed); answered > 2*time.Second {
			t.Errorf("Trigger won %v after the clock was set right; want within a refused claim's retry (1s)", answered)
		}
		time.Sleep(time.Second)
		if n := m.count("m:after-the-step"); n != 1 {
			t.Errorf("the triggered slot ran %d times; want once", n)
		}
	})
}

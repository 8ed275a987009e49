package scheduler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// countingClock is the bubble's clock, moved by an offset, counting the
// timers made and stopped.
type countingClock struct {
	offset        atomic.Int64
	made, stopped atomic.Int64
}

func (c *countingClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *countingClock) NewTimer(d time.Duration) Timer {
	c.made.Add(1)
	return &countedTimer{t: time.NewTimer(d), c: c}
}

type countedTimer struct {
	t *time.Timer
	c *countingClock
}

func (t *countedTimer) C() <-chan time.Time { return t.t.C }
func (t *countedTimer) Stop() bool {
	t.c.stopped.Add(1)
	return t.t.Stop()
}

// waiters starts n runs that wait for at, and returns what each got and
// when, once they all have.
func waiters(r *runner, ctx context.Context, n int, at time.Time) (wait func() ([]error, []time.Time)) {
	errs, when := make([]error, n), make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = r.waitForSlot(ctx, at)
			when[i] = time.Now()
		})
	}
	return func() ([]error, []time.Time) { wg.Wait(); return errs, when }
}

func TestRunsDueAtOneInstantShareATimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &countingClock{}
		r := &runner{clock: clock}
		at := time.Now().Add(300 * time.Millisecond)
		wait := waiters(r, context.Background(), 1000, at)
		other := waiters(r, context.Background(), 10, at.Add(time.Millisecond))
		synctest.Wait()
		// The first ownTimers runs of an instant have timers of their own;
		// the other 968 share one.
		if got, want := clock.made.Load(), int64(ownTimers+1+10); got != want {
			t.Fatalf("1,010 runs waiting for 2 instants made %d timers, want %d", got, want)
		}
		errs, when := wait()
		for i := range errs {
			if errs[i] != nil || !when[i].Equal(at) {
				t.Fatalf("run %d returned %v at %v, want nil at the instant %v", i, errs[i], when[i], at)
			}
		}
		errs, when = other()
		for i := range errs {
			if errs[i] != nil || !when[i].Equal(at.Add(time.Millisecond)) {
				t.Fatalf("run %d of the later instant returned %v at %v, want nil at %v", i, errs[i], when[i], at.Add(time.Millisecond))
			}
		}
		synctest.Wait() // the gates' goroutines have ended
		if len(r.gates.at) != 0 {
			t.Fatalf("%d gates left after both opened", len(r.gates.at))
		}
	})
}

func TestGateStopsOnceEveryRunHasLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &countingClock{}
		r := &runner{clock: clock}
		at := time.Now().Add(500 * time.Millisecond)
		own := waiters(r, context.Background(), ownTimers, at) // the runs with timers of their own
		synctest.Wait()
		clock.made.Store(0)
		lost := errors.New("lease lost")
		ctx1, cancel1 := context.WithCancelCause(context.Background())
		ctx2, cancel2 := context.WithCancelCause(context.Background())
		wait1 := waiters(r, ctx1, 3, at)
		wait2 := waiters(r, ctx2, 2, at)
		time.Sleep(100 * time.Millisecond)
		cancel1(lost)
		errs, when := wait1()
		for i := range errs {
			if !errors.Is(errs[i], lost) || time.Since(when[i]) != 0 {
				t.Fatalf("a run whose context ended returned %v at %v, want the cause at once", errs[i], when[i])
			}
		}
		synctest.Wait()
		if clock.made.Load() != 1 || clock.stopped.Load() != 0 {
			t.Fatalf("%d timers made, %d stopped, while 2 runs still wait at the gate: want 1 and 0", clock.made.Load(), clock.stopped.Load())
		}
		cancel2(lost)
		wait2()
		synctest.Wait()
		if clock.stopped.Load() != 1 || len(r.gates.at) != 0 {
			t.Fatalf("every run has left: %d timers stopped, %d gates left; want 1 and 0", clock.stopped.Load(), len(r.gates.at))
		}
		// A run that waits for the same instant afterwards gets a new gate.
		errs, when = waiters(r, context.Background(), 1, at)()
		if errs[0] != nil || !when[0].Equal(at) || clock.made.Load() != 2 {
			t.Fatalf("a later run returned %v at %v with %d timers made; want nil at %v, 2", errs[0], when[0], clock.made.Load(), at)
		}
		errs, when = own()
		for i := range errs {
			if errs[i] != nil || !when[i].Equal(at) {
				t.Fatalf("run %d with a timer of its own returned %v at %v, want nil at %v", i, errs[i], when[i], at)
			}
		}
	})
}

// A run that joins a gate waits no longer than the gate's first run: with
// its clock stepped back after the first joined, a run still waits at most
// maxAhead from the first's claim.
func TestLaterRunsWaitNoLongerThanTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &countingClock{}
		r := &runner{clock: clock}
		start := time.Now()
		at := clock.Now().Add(200 * time.Millisecond)
		own := waiters(r, context.Background(), ownTimers, at)
		first := waiters(r, context.Background(), 1, at)
		synctest.Wait()
		clock.offset.Add(int64(-10 * time.Second)) // the slot is now 10.2s away on this clock
		later := waiters(r, context.Background(), 1, at)
		for _, w := range []func() ([]error, []time.Time){own, first, later} {
			errs, when := w()
			for i := range errs {
				if errs[i] != nil || when[i].Sub(start) != 200*time.Millisecond {
					t.Fatalf("returned %v after %v, want nil after 200ms", errs[i], when[i].Sub(start))
				}
			}
		}
		if got, want := clock.made.Load(), int64(ownTimers+1); got != want {
			t.Fatalf("%d timers, want %d", got, want)
		}
	})
}

package locking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotcron/slotcron/locking"
)

// How the wall-time tests bound time.
//
// These tests run against a real Redis, so they run on wall time, on machines
// that may be busy: a timer fires late and a runnable goroutine waits for a
// CPU, by amounts no test controls (three `go test -race` runs on two cores
// delay a timer by tens of milliseconds, now and then by a few hundred). So no
// bound here is a reading of the clock, taken after the fact, compared with a
// fixed duration, nor a guess at the delay. Each bound is one of:
//
//   - a reference timer due when the property says the event is due at the
//     latest (lossWithin, refTimers). The scheduler delays the reference as
//     it delays the code's own timer, so only a real difference fails: the
//     event must follow the reference within grace (dueBy).
//   - a reference timer due at the earliest moment the path the test rules
//     out could deliver the result (a backoff timer, an expiry): the result
//     must come first (before). Its margin is that path's own duration.
//   - a TTL long enough that a watchdog renewing every TTL/3 survives a stall
//     of a few hundred milliseconds (keptAlive, keepAliveTTL).
//   - a window that a contrast test shows the wrong behaviour cannot beat
//     (starveWindow), or a timer of the wrong path, which never fires early,
//     made long next to a loaded machine's delays (the node timeout of
//     TestRedlockPausedNodeBoundedByNodeTimeout).
//
// Lower bounds ("it did not end too early") read the clock: a late reading
// only makes them more lenient, never fail.

// grace is how long after its reference timer an event that was due no later
// may still be seen: the time for the goroutine of an already-fired timer to
// run. It is far shorter than the slower paths the tests rule out: a renewal
// waiting for its reply (a client's socket timeout, 1s or 3s), the next
// renewal (TTL/3), one more Redlock attempt (two node timeouts).
const grace = 50 * time.Millisecond

// keepAliveTTL is the TTL of the watchdog tests: a renewal every TTL/3 leaves
// 2/3 of it (about 650ms) for a stalled process to send the next one.
const keepAliveTTL = time.Second

// refTimers returns a channel that is closed once timers for ds, armed one
// after another from now, have all fired: the timers that the code under test
// runs through, one after another, on its slowest correct path. Each suffers
// the scheduling delay its counterpart in the code suffers. stop ends the
// chain early; call it before the test returns.
func refTimers(ds ...time.Duration) (fired <-chan struct{}, stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		for _, d := range ds {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-quit:
				t.Stop()
				return
			}
		}
		close(done)
	}()
	return done, func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
	}
}

// dueBy fails the test unless done is closed before ref is, or within slack
// after it: grace when the code's last timer is all that is left to run, more
// when it also works between its timers (see its caller).
func dueBy(t *testing.T, done, ref <-chan struct{}, slack time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
		return
	case <-ref:
	}
	g := time.NewTimer(slack)
	defer g.Stop()
	select {
	case <-done:
	case <-g.C:
		t.Fatalf("%s: still not done %v after its reference timer fired", what, slack)
	}
}

// lossWithin asserts that l ends as lost within limit of since, and returns how
// long after since the loss was seen. since must be no earlier than the send
// time of the last request that could have proven ownership (a confirmed
// renewal, the acquisition, or, for a fault injected into Redis, the moment
// the fault call returned).
//
// It checks two things. The lease's Deadline, a value, must be within limit
// of since: the lease counts SafeTTL, less than the TTL, from that last send.
// And the lease must end by that Deadline: a reference timer is armed for it,
// and the loss must follow within grace. A loaded machine fires both timers
// late, so only a real difference fails: a lease whose loss waits for
// anything but its own timer (a renewal's reply, the next renewal) misses by
// far more. If a renewal confirmed after the Deadline was read moves it, the
// reference follows; the new Deadline is checked against the limit too.
func lossWithin(t *testing.T, l *locking.Lease, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for due := l.Deadline(); ; {
		if over := due.Sub(since.Add(limit)); over > 0 {
			t.Fatalf("the lease claims ownership %v past the limit of %v", over, limit)
		}
		ref, stop := refTimers(time.Until(due))
		select {
		case <-l.Done():
		case <-ref:
			if moved := l.Deadline(); moved.After(due) {
				stop()
				due = moved
				continue
			}
			dueBy(t, l.Done(), ref, grace, "lease not reported lost by its own Deadline")
		}
		stop()
		break
	}
	took := time.Since(since)
	cause := context.Cause(l.Context())
	if !errors.Is(cause, locking.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", cause)
	}
	t.Logf("loss reported after %v: %v", took.Round(time.Millisecond), cause)
	return took
}

// keptAlive holds l for hold while its watchdog renews it. It fails the test
// if the lease ends, if held (called about every 25ms) says Redis no longer
// has the hold, or if the watchdog stopped renewing: the lease's Deadline
// must end up past the end of the hold, which only a renewal confirmed in the
// hold's last TTL can do. Every renewal before it was confirmed too, since
// Redis would have expired the hold otherwise, and a renewal of an expired
// hold ends the lease.
func keptAlive(t *testing.T, l *locking.Lease, hold time.Duration, held func() error) {
	t.Helper()
	start := time.Now()
	end := start.Add(hold)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		if err := held(); err != nil {
			t.Fatalf("%v into the hold: %v", time.Since(start).Round(time.Millisecond), err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lease ended %v into the hold: %v", time.Since(start).Round(time.Millisecond), context.Cause(l.Context()))
		case <-tick.C:
		}
	}
	if err := held(); err != nil {
		t.Fatalf("at the end of the hold: %v", err)
	}
	if d := l.Deadline(); !d.After(end) {
		t.Fatalf("Deadline is %v before the end of the %v hold: no renewal confirmed in its last TTL", end.Sub(d), hold)
	}
}

// before waits for a result on res and returns it, failing the test if ref
// comes first. ref is the earliest moment the path the test rules out (a
// backoff timer, an expiry) could have delivered the result, so the margin
// is that path's own duration, not a guess at scheduling delay.
func before(t *testing.T, res <-chan error, ref time.Time, what string) error {
	t.Helper()
	timer := time.NewTimer(time.Until(ref))
	defer timer.Stop()
	select {
	case err := <-res:
		return err
	case <-timer.C:
		t.Fatal(what)
		return nil
	}
}

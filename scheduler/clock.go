package scheduler

import "time"

// Clock is the scheduler's source of time: when slots are due and how late a
// start is. Leases do not use it; their TTLs run on Redis and on the monotonic
// clock.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a timer made by a Clock.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock returns the machine's clock. Its timers fire on time to within
// about a tenth of a millisecond; see preciseTimer.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return newPreciseTimer(d) }

// preciseLead is how early a preciseTimer's Go timer fires: more than the
// runtime's lateness, which is under 1ms on an idle machine.
const preciseLead = 2 * time.Millisecond

// preciseTimer fires at its time, not up to a millisecond after it. Go's
// runtime waits for timers in the netpoller, whose timeout has a resolution
// of 1ms, so a time.Timer fires 0 to 1ms late (about 0.7ms at the median on
// the machine the dispatch benchmark ran on); every slot's claims would leave
// that late. This timer's Go timer fires preciseLead early, and the rest is
// slept in the kernel (nanosleep on Linux), which wakes within the thread's
// timer slack (50µs by default). Elsewhere, the rest is a time.Sleep.
//
// Any d is safe: one of zero or less fires at once (the due.Sub(now) of a
// zero due time saturates at the most negative Duration), and the largest
// waits about 292 years. The rest is measured on the monotonic clock from
// the start, so no arithmetic can overflow.
type preciseTimer struct {
	c chan time.Time
	t *time.Timer
}

func newPreciseTimer(d time.Duration) *preciseTimer {
	start := time.Now()
	d = max(d, 0)
	pt := &preciseTimer{c: make(chan time.Time, 1)}
	pt.t = time.AfterFunc(max(d, preciseLead)-preciseLead, func() {
		if rest := d - time.Since(start); rest > 0 {
			sleepPrecisely(rest)
		}
		pt.c <- time.Now() // 1-buffered, and sent once
	})
	return pt
}

func (t *preciseTimer) C() <-chan time.Time { return t.c }

// Stop prevents the timer from firing, unless its last preciseLead has begun
// (then it returns false, and C may still receive).
func (t *preciseTimer) Stop() bool { return t.t.Stop() }

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

// SystemClock returns the machine's clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

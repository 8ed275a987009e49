package main

import (
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/slotcron/slotcron/scheduler"
)

// A replica's clock here is the machine's, read with an offset, as a machine
// whose clock is off by that much reads it. Timers still wait real
// durations, so a replica whose clock lags by d fires each wait, computed
// from its own Now, d later on the real clock. Each scheduler keeps its own
// timers: slotcron its precise timer, gocron Go's time.AfterFunc.

// slotcronClock is a scheduler.Clock offset from the machine's.
type slotcronClock struct {
	base   scheduler.Clock
	offset time.Duration
}

func newSlotcronClock(offset time.Duration) slotcronClock {
	return slotcronClock{base: scheduler.SystemClock(), offset: offset}
}

func (c slotcronClock) Now() time.Time                           { return c.base.Now().Add(c.offset) }
func (c slotcronClock) NewTimer(d time.Duration) scheduler.Timer { return c.base.NewTimer(d) }

// gocronClock is a clockwork.Clock offset from the machine's, for
// gocron.WithClock. gocron v2 (v2.21.2) reads time for scheduling only
// through its clock's Now and AfterFunc; the rest of clockwork's real clock
// is relative and left as it is, but Since and Until read Now, so they
// are offset too.
type gocronClock struct {
	clockwork.Clock
	offset time.Duration
}

func newGocronClock(offset time.Duration) gocronClock {
	return gocronClock{Clock: clockwork.NewRealClock(), offset: offset}
}

func (c gocronClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c gocronClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c gocronClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// Package validity measures how long ownership of a Redis key is proven, on
// the local monotonic clock, for every kind of lease slotcron has: the lock
// family's (locking) and the scheduler's slot leases (slotstore). It also
// holds ErrLeaseLost, the one cause of a lost lease, which both of those
// packages export, so that errors.Is works with either name.
//
// It imports nothing of Redis: the slot contract (package slot) depends on it.
package validity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrLeaseLost is the cause of a lease context's cancellation when ownership
// can no longer be proven. locking.ErrLeaseLost and slot.ErrLeaseLost are
// this value.
var ErrLeaseLost = errors.New("locking: lease lost")

// Timer is how long ownership of a key is proven for. It ends the owner's
// context when that time runs out, on its own timer, so loss is reported on
// time even while a renewal call hangs on a frozen server.
//
// A TTL that Redis set when it received a request sent at t cannot run out
// before t + ttl. A Timer counts from t and also takes off a drift margin
// (SafeTTL), so it always ends before the key can expire.
type Timer struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	until   time.Time
	lastErr error // the newest renewal failure, reported in the cause when time runs out
	timer   *time.Timer
}

// SafeTTL is how long after sending a request that set ttl the key is surely
// still there: ttl minus a clock-drift margin of 1% + 2ms (Redlock's figure).
func SafeTTL(ttl time.Duration) time.Duration {
	return ttl - ttl/100 - 2*time.Millisecond
}

// Start starts a Timer of ttl counted from sentAt. Its context keeps parent's
// values but not parent's cancellation.
func Start(parent context.Context, sentAt time.Time, ttl time.Duration) *Timer {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	v := &Timer{ctx: ctx, cancel: cancel, until: sentAt.Add(SafeTTL(ttl))}
	v.mu.Lock() // expire may run before AfterFunc returns
	v.timer = time.AfterFunc(time.Until(v.until), v.expire)
	v.mu.Unlock()
	return v
}

// Context is cancelled when the Timer ends: with a nil cause when released
// (End(nil)), with a cause wrapping ErrLeaseLost when ownership was lost.
func (v *Timer) Context() context.Context { return v.ctx }

// Extend moves the end to sentAt + SafeTTL(ttl), for a renewal that Redis
// confirmed. It does nothing once the Timer has ended: a lost lease stays lost.
//
// It takes each confirmation as the newest, earlier or later, while Redis
// keeps the TTL of the renewal it ran last. So an owner that renews with
// different TTLs has one renewal in flight at a time (locking.Lease); with one
// TTL, every confirmed renewal's sentAt + ttl comes before the key expires,
// whatever the order of the answers.
func (v *Timer) Extend(sentAt time.Time, ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		return
	}
	v.until = sentAt.Add(SafeTTL(ttl))
	v.lastErr = nil
	v.timer.Reset(time.Until(v.until))
}

// Shorten moves the end back to sentAt + SafeTTL(ttl) if that is sooner: for
// a request that set ttl and got no answer, which Redis may have run. Like
// Extend, it does nothing once the Timer has ended.
func (v *Timer) Shorten(sentAt time.Time, ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if u := sentAt.Add(SafeTTL(ttl)); v.ctx.Err() == nil && u.Before(v.until) {
		v.until = u
		v.timer.Reset(time.Until(u))
	}
}

// Failed records a renewal that got no answer; ownership stays proven until
// the time runs out, and the cause then names err.
func (v *Timer) Failed(err error) {
	v.mu.Lock()
	v.lastErr = err
	v.mu.Unlock()
}

// Deadline is when ownership stops being proven, unless extended first.
func (v *Timer) Deadline() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.until
}

// Proven reports whether ownership is still proven. Once the time has run
// out it ends the Timer first, as its timer would: the timer fires on a
// goroutine of its own, and a caller about to act on ownership (a job about
// to start, after a pause of the process that passed the end) must not
// depend on which of the two runs first.
func (v *Timer) Proven() bool {
	v.mu.Lock()
	left := time.Until(v.until)
	v.mu.Unlock()
	if left <= 0 {
		v.expire() // it looks again, under the lock: an Extend may come first
	}
	return v.ctx.Err() == nil
}

func (v *Timer) expire() {
	v.mu.Lock()
	if left := time.Until(v.until); left > 0 { // extended while the timer fired
		v.timer.Reset(left)
		v.mu.Unlock()
		return
	}
	lastErr := v.lastErr
	v.mu.Unlock()
	if lastErr != nil {
		v.End(fmt.Errorf("%w: TTL ran out while renewals failed: %w", ErrLeaseLost, lastErr))
		return
	}
	v.End(fmt.Errorf("%w: TTL ran out with no confirmed renewal", ErrLeaseLost))
}

// End ends the Timer with cause (nil means released) and stops its timer.
// Only the first call counts.
func (v *Timer) End(cause error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.timer.Stop()
	v.cancel(cause)
}

// LostTo is the cause for a token check that failed: ErrLeaseLost, saying why.
func LostTo(what string) error {
	return fmt.Errorf("%w: %s", ErrLeaseLost, what)
}

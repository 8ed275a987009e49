package locking

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// validity is how long ownership of a key is proven for, measured on the local
// monotonic clock. It ends the owner's context when that time runs out, on its
// own timer, so loss is reported on time even while a renewal call hangs on a
// frozen server.
//
// A TTL that Redis set when it received a request sent at t cannot run out
// before t + ttl. validity counts from t and also takes off a drift margin,
// so it always ends before the key can expire.
type validity struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	until   time.Time
	lastErr error // the newest renewal failure, reported in the cause when time runs out
	timer   *time.Timer
}

// safeTTL is how long after sending a request that set ttl the key is surely
// still there: ttl minus a clock-drift margin of 1% + 2ms (Redlock's figure).
func safeTTL(ttl time.Duration) time.Duration {
	return ttl - ttl/100 - 2*time.Millisecond
}

// newValidity starts a validity of ttl counted from sentAt. Its context keeps
// parent's values but not parent's cancellation.
func newValidity(parent context.Context, sentAt time.Time, ttl time.Duration) *validity {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	v := &validity{ctx: ctx, cancel: cancel, until: sentAt.Add(safeTTL(ttl))}
	v.mu.Lock() // expire may run before AfterFunc returns
	v.timer = time.AfterFunc(time.Until(v.until), v.expire)
	v.mu.Unlock()
	return v
}

// extend moves the end to sentAt + ttl, for a renewal that Redis confirmed.
// It does nothing once the validity has ended: a lost lease stays lost.
func (v *validity) extend(sentAt time.Time, ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		return
	}
	v.until = sentAt.Add(safeTTL(ttl))
	v.lastErr = nil
	v.timer.Reset(time.Until(v.until))
}

// failed records a renewal that did not get an answer; the lease stays valid
// until its time runs out.
func (v *validity) failed(err error) {
	v.mu.Lock()
	v.lastErr = err
	v.mu.Unlock()
}

// deadline is when ownership stops being proven, unless extended first.
func (v *validity) deadline() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.until
}

func (v *validity) expire() {
	v.mu.Lock()
	if left := time.Until(v.until); left > 0 { // extended while the timer fired
		v.timer.Reset(left)
		v.mu.Unlock()
		return
	}
	lastErr := v.lastErr
	v.mu.Unlock()
	if lastErr != nil {
		v.end(fmt.Errorf("%w: TTL ran out while renewals failed: %w", ErrLeaseLost, lastErr))
		return
	}
	v.end(fmt.Errorf("%w: TTL ran out with no confirmed renewal", ErrLeaseLost))
}

// end ends the validity with cause (nil means released) and stops the timer.
// Only the first call counts.
func (v *validity) end(cause error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.timer.Stop()
	v.cancel(cause)
}

// lostTo is the cause for a token check that failed.
func lostTo(what string) error {
	return fmt.Errorf("%w: %s", ErrLeaseLost, what)
}

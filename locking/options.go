package locking

import (
	"fmt"
	"time"
)

// Option configures an acquisition: Obtain, Lock, and their counterparts on
// the reentrant lock, the read-write lock and Redlock.
type Option func(*options) error

type options struct {
	fencing    bool
	watchdog   bool
	minBackoff time.Duration
	maxBackoff time.Duration
	backoffSet bool
}

func defaultOptions() options {
	return options{minBackoff: 8 * time.Millisecond, maxBackoff: 500 * time.Millisecond}
}

// WithFencing makes the lease carry a fencing token: a per-key counter that
// Redis advances in the same script that takes the key (still one round trip),
// to the larger of its last value plus 1 and Redis's clock in microseconds.
// Pass Lease.Fence to the systems the owner writes to, so that they can refuse
// a paused former owner. Only plain leases (Obtain, Lock) support it; the
// other locks refuse it with an error.
func WithFencing() Option {
	return func(o *options) error { o.fencing = true; return nil }
}

// WithWatchdog starts the lease's watchdog as soon as the lease is taken; see
// Lease.KeepAlive.
func WithWatchdog() Option {
	return func(o *options) error { o.watchdog = true; return nil }
}

// WithBackoff sets the bounds of the fallback wait between attempts of a
// blocking acquisition, which doubles from min to max, with jitter, and never
// exceeds the holder's remaining TTL. Defaults: 8ms and 500ms. A release
// message ends the wait early.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max < min {
			return fmt.Errorf("locking: WithBackoff: need 0 < min <= max, got min %v, max %v", min, max)
		}
		o.minBackoff, o.maxBackoff, o.backoffSet = min, max, true
		return nil
	}
}

package locking

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/slotcron/slotcron/internal/validity"
)

// releaseTimeout bounds Release, which runs on a context detached from the
// caller's: a shutdown that has already cancelled the caller's context must
// still be able to release.
const releaseTimeout = 5 * time.Second

// Lease is ownership of one key, proven by a random token that only this
// Lease knows.
//
// A lease can be lost at any moment: the key can expire during a pause of this
// process, a Redis failover can drop it, or an operator can delete it. Done and
// Context report loss as soon as ownership can no longer be proven; work that
// must not run twice should also pass Fence to the systems it writes to.
//
// A Lease is safe for concurrent use.
type Lease struct {
	key   string
	token string
	fence int64
	hold  hold
	v     *validity.Timer

	// turn is held by one renewal, Extend's or the watchdog's, from its send
	// until its answer is applied to v. Redis keeps the TTL that the last
	// renewal it ran set, and v follows the last answer applied; with one
	// renewal at a time they are the same one. It is a 1-buffered channel, not
	// a mutex, so that a renewal waiting for it can give up when its context
	// ends, when Release stops the watchdog, or when the lease ends.
	turn chan struct{}

	mu  sync.Mutex
	ttl time.Duration
	// unsure is the TTL of an Extend that got no answer, shorter than ttl:
	// Redis may have set it. The watchdog renews within a third of it,
	// until a renewal is confirmed. 0 for none.
	unsure   time.Duration
	released bool
	watching bool
	// stopped ends when Release stops the watchdog, and with it the
	// renewal in flight: Release need not wait for its answer, since both
	// check the token in Redis.
	stopped   context.Context
	stopWatch context.CancelFunc
	watchDone chan struct{}
	// rearm tells the watchdog that Extend has set a new TTL: its next
	// renewal is due a third of that from now. 1-buffered; a full one
	// already says so.
	rearm chan struct{}

	releaseOnce sync.Once
	releaseErr  error
}

// hold is how one kind of lock checks and changes a hold in Redis. Every
// method compares the hold's token (or owner) inside a script.
type hold interface {
	// extend sets the hold's TTL; false means the token no longer holds it.
	extend(ctx context.Context, ttl time.Duration) (bool, error)
	// release gives the hold up; false means the token no longer held it.
	release(ctx context.Context) (bool, error)
	// pttl is the hold's remaining TTL in ms: -1 for none, -3 when not held.
	pttl(ctx context.Context) (int64, error)
}

// newLease returns a lease whose ownership was proven by a request sent at sentAt.
func newLease(h hold, key, token string, fence int64, ttl time.Duration, sentAt time.Time, parent context.Context) *Lease {
	stopped, stopWatch := context.WithCancel(context.Background())
	return &Lease{
		key:       key,
		token:     token,
		fence:     fence,
		hold:      h,
		v:         validity.Start(parent, sentAt, ttl),
		turn:      make(chan struct{}, 1),
		ttl:       ttl,
		stopped:   stopped,
		stopWatch: stopWatch,
		watchDone: make(chan struct{}),
		rearm:     make(chan struct{}, 1),
	}
}

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Token returns the lease's token: 128 random bits, base64url-encoded; for a
// reentrant hold, the owner ID.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token: a number that grows with every lease taken
// on this key with WithFencing, at least Redis's clock in microseconds, so
// that it still grows after Redis lost its counter (provided the Redis
// hosts' clocks are in step). It is 0 without WithFencing.
func (l *Lease) Fence() int64 { return l.fence }

// Done returns a channel that is closed when the lease ends: when it is
// released, or when ownership can no longer be proven (see Context).
func (l *Lease) Done() <-chan struct{} { return l.v.Context().Done() }

// Context returns a context that is cancelled when the lease ends. After a loss,
// context.Cause returns an error that wraps ErrLeaseLost and says why; after
// Release it returns context.Canceled. The context carries the values of the
// context given to Obtain or Lock, but not its cancellation.
func (l *Lease) Context() context.Context { return l.v.Context() }

// Deadline returns the local time until which ownership is proven: the last
// confirmed (re)set of the TTL, less a clock-drift margin.
func (l *Lease) Deadline() time.Time { return l.v.Deadline() }

// TTL asks Redis for the key's remaining time to live. It returns ErrNotHeld if
// the key no longer holds this lease's token. One round trip.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	ms, err := l.hold.pttl(ctx)
	if err != nil {
		return 0, fmt.Errorf("locking: TTL of %q: %w", l.key, err)
	}
	if ms == -3 {
		return 0, ErrNotHeld
	}
	if ms < 0 {
		return 0, fmt.Errorf("locking: TTL of %q: key holds the token but has no expiry (PTTL %d)", l.key, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Extend raises the key's TTL to ttl, if the key still holds this lease's
// token, and makes ttl the period the lease counts on and the watchdog renews
// for: its next renewal is due ttl/3 after Extend's, whatever the old TTL was.
// It never lowers the TTL in Redis (an Extend whose answer was lost may reach
// Redis after a later one was confirmed, and must not cut the TTL that one
// set): with a shorter ttl, the key outlives the lease by up to the old TTL,
// unless the lease is released. It returns ErrNotHeld, and
// ends the lease as lost, when the token check fails. One round trip, once a
// renewal in flight (the watchdog's, or another Extend's) has been answered;
// it blocks until Redis answers or ctx ends, and returns ErrNotHeld if the
// lease ends while it waits. An Extend that gets no answer (ctx ended, the
// network failed) may still have run in Redis: the lease then counts on the
// shorter of the two TTLs, ending by ttl after the send unless a renewal is
// confirmed first, and the watchdog renews within a third of it.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL("Extend", ttl); err != nil {
		return err
	}
	if !l.takeTurn(ctx.Done()) {
		if err := ctx.Err(); err != nil && l.v.Context().Err() == nil {
			return fmt.Errorf("locking: Extend %q: %w", l.key, err)
		}
		return ErrNotHeld
	}
	defer l.giveTurn()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released || l.v.Context().Err() != nil {
		return ErrNotHeld
	}
	ok, err := l.extend(ctx, ttl)
	if err != nil {
		l.mu.Lock()
		if ttl < l.ttl && (l.unsure == 0 || ttl < l.unsure) {
			l.unsure = ttl
		}
		l.mu.Unlock()
		l.rearmWatchdog()
		return fmt.Errorf("locking: Extend %q: %w (Redis may have set the TTL: the lease counts on it)", l.key, err)
	}
	if !ok {
		return ErrNotHeld
	}
	l.mu.Lock()
	l.ttl, l.unsure = ttl, 0
	l.mu.Unlock()
	l.rearmWatchdog()
	return nil
}

// rearmWatchdog tells the watchdog, if it runs, to arm its timer for its
// renewal period from now.
func (l *Lease) rearmWatchdog() {
	select {
	case l.rearm <- struct{}{}:
	default:
	}
}

// takeTurn waits until no other renewal of l is in flight and takes the turn;
// false, without it, when stop is closed or the lease ends first.
func (l *Lease) takeTurn(stop <-chan struct{}) bool {
	select {
	case l.turn <- struct{}{}:
		return true
	case <-stop:
	case <-l.v.Context().Done():
	}
	return false
}

func (l *Lease) giveTurn() { <-l.turn }

// extend runs the token-checked PEXPIRE and updates the validity: ok is true
// when Redis confirmed; a failed token check ends the lease as lost; with no
// answer, the proof ends no later than ttl after the send, which Redis may
// have set. The caller holds the turn.
func (l *Lease) extend(ctx context.Context, ttl time.Duration) (ok bool, err error) {
	sent := time.Now()
	ok, err = l.hold.extend(ctx, ttl)
	if err != nil {
		l.v.Shorten(sent, ttl)
		return false, err
	}
	if !ok {
		l.v.End(validity.LostTo("the key no longer holds this token"))
		return false, nil
	}
	l.v.Extend(sent, ttl)
	return true, nil
}

// KeepAlive starts the watchdog if it is not running: one goroutine that renews
// the key every TTL/3 until Release or loss. A failed token check ends the
// lease at once; a network error is retried until the TTL would have run out.
// It returns ErrNotHeld after Release and the loss cause after a loss.
func (l *Lease) KeepAlive() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return ErrNotHeld
	}
	if err := context.Cause(l.v.Context()); err != nil {
		return err
	}
	if !l.watching {
		l.watching = true
		go l.watch()
	}
	return nil
}

func (l *Lease) watch() {
	defer close(l.watchDone)
	timer := time.NewTimer(l.renewPeriod())
	defer timer.Stop()
	for {
		select {
		case <-l.stopped.Done():
			return
		case <-l.v.Context().Done():
			return
		case <-l.rearm: // a shorter TTL must not wait out the old period
			timer.Reset(l.renewPeriod())
			continue
		case <-timer.C:
		}
		if !l.takeTurn(l.stopped.Done()) {
			return
		}
		select {
		case <-l.rearm: // an Extend that had the turn before: this renewal arms the timer itself
		default:
		}
		// The TTL and the deadline are read under the turn: an Extend that
		// had it before has set both.
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		// The call may not outlive the proof of ownership it tries to extend,
		// nor a Release.
		ctx, cancel := context.WithDeadline(l.stopped, l.v.Deadline())
		ok, err := l.extend(ctx, ttl)
		cancel()
		if err != nil && l.stopped.Err() != nil { // Released: its answer no longer matters
			l.giveTurn()
			return
		}
		if err != nil {
			l.v.Failed(err) // before a later renewal's confirmation clears it
		}
		if ok {
			l.mu.Lock()
			l.unsure = 0 // Redis has this renewal's TTL now
			l.mu.Unlock()
		}
		l.giveTurn()
		switch {
		case err != nil:
			timer.Reset(retryDelay(l.proofTTL()))
		case ok:
			timer.Reset(l.renewPeriod())
		default:
			return // lost; extend has ended the lease
		}
	}
}

func (l *Lease) renewPeriod() time.Duration { return l.proofTTL() / 3 }

// proofTTL is the TTL that the lease's proof of ownership counts on: an
// Extend's that got no answer (Redis may have set it) until a renewal is
// confirmed, else the lease's.
func (l *Lease) proofTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unsure > 0 {
		return l.unsure
	}
	return l.ttl
}

// retryDelay is the pause before retrying a renewal that failed on the network:
// a tenth of the TTL, with jitter, so that several retries fit before it runs out.
func retryDelay(ttl time.Duration) time.Duration {
	d := ttl / 10
	return d/2 + rand.N(d/2+1)
}

// Release gives the hold up if the key still holds this lease's token
// (deleting the key, or decrementing a reentrant count), publishes a release
// message that wakes waiting callers, stops the watchdog and ends the lease. It runs on a context detached from ctx (keeping its values) and bounded
// by 5s, so it works during shutdown. It returns ErrNotHeld if the key no longer
// held the token. A release leaves its token in a receipt that Redis keeps for
// a minute (a key beside the lock's, in its hash slot), so that a Release whose
// answer was lost and that go-redis sent again returns nil, unless another
// release of the key came between. Release is idempotent: later calls return
// the first result.
func (l *Lease) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() {
		l.mu.Lock()
		l.released = true
		watching := l.watching
		l.mu.Unlock()
		l.stopWatch()
		if watching {
			<-l.watchDone
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		ok, err := l.hold.release(rctx)
		switch {
		case err != nil:
			l.releaseErr = fmt.Errorf("locking: Release %q: %w", l.key, err)
			l.v.End(nil)
		case !ok:
			l.releaseErr = ErrNotHeld
			l.v.End(validity.LostTo("the key no longer held this token at release"))
		default:
			l.v.End(nil)
		}
	})
	return l.releaseErr
}

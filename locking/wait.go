package locking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// attempt tries once to acquire. On ErrNotObtained it also returns how long
// the current holder has left (-1 when unknown), which caps the next wait.
type attempt func(ctx context.Context) (*Lease, time.Duration, error)

// acquire runs try once, or, when wait is true, until it succeeds or ctx ends:
// it subscribes to channel and retries on every release message, or after a
// jittered backoff capped by the holder's remaining TTL. When an attempt fails
// on the network or on ctx, undo (if not nil) runs on a detached bounded
// context, because the failed attempt may have acquired after all.
func (c *Client) acquire(ctx context.Context, channel string, o options, wait bool, try attempt, undo func(context.Context)) (*Lease, error) {
	l, _, err := try(ctx)
	if !wait || !errors.Is(err, ErrNotObtained) {
		return c.finish(ctx, l, err, o, undo)
	}

	ps := c.rdb.Subscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription is confirmed
		return c.finish(ctx, nil, fmt.Errorf("locking: subscribe to %q: %w", channel, err), o, undo)
	}
	released := ps.Channel()

	backoff := o.minBackoff
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		// Try again now that the subscription is in place: a release between
		// the first attempt and the subscription would otherwise be missed.
		l, holderTTL, err := try(ctx)
		if !errors.Is(err, ErrNotObtained) {
			return c.finish(ctx, l, err, o, undo)
		}
		timer.Reset(waitFor(backoff, holderTTL))
		select {
		case <-ctx.Done():
			return c.finish(ctx, nil, ctx.Err(), o, undo)
		case <-released:
			timer.Stop() // go.mod says go >= 1.23: no stale tick after Stop
		case <-timer.C:
			backoff = min(2*backoff, o.maxBackoff)
		}
	}
}

// finish starts the watchdog of a new lease, or undoes a failed attempt.
func (c *Client) finish(ctx context.Context, l *Lease, err error, o options, undo func(context.Context)) (*Lease, error) {
	if err == nil {
		if o.watchdog {
			_ = l.KeepAlive() // cannot fail on a fresh lease
		}
		return l, nil
	}
	if undo != nil && !errors.Is(err, ErrNotObtained) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		undo(uctx)
		cancel()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, ctxErr
	}
	// A command cut off by the deadline (go-redis sets its connection's
	// deadline from ctx's) fails with an i/o timeout, which can come before
	// ctx's own timer marks it done: the caller's deadline is still why.
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return nil, context.DeadlineExceeded
	}
	return nil, err
}

// waitFor is a jittered backoff in [b/2, b], or the holder's remaining TTL
// (plus a millisecond) when that is shorter.
func waitFor(backoff, holderTTL time.Duration) time.Duration {
	d := backoff/2 + rand.N(backoff/2+1)
	if holderTTL >= 0 && holderTTL+time.Millisecond < d {
		d = holderTTL + time.Millisecond
	}
	return d
}

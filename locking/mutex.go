package locking

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClient is what the lock family needs from go-redis: scripts, and pub/sub
// for the release messages that wake waiters. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient satisfy it.
type RedisClient interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Client takes leases on keys of one Redis deployment.
type Client struct {
	rdb RedisClient
}

// New returns a Client that uses rdb. It starts no goroutine and sends nothing.
func New(rdb RedisClient) *Client {
	return &Client{rdb: rdb}
}

// Option configures Obtain and Lock.
type Option func(*options) error

type options struct {
	fencing    bool
	watchdog   bool
	minBackoff time.Duration
	maxBackoff time.Duration
}

func defaultOptions() options {
	return options{minBackoff: 8 * time.Millisecond, maxBackoff: 500 * time.Millisecond}
}

// WithFencing makes the lease carry a fencing token: a per-key counter that
// Redis increments in the same script that takes the key (still one round trip).
// Pass Lease.Fence to the systems the owner writes to, so that they can refuse
// a paused former owner.
func WithFencing() Option {
	return func(o *options) error { o.fencing = true; return nil }
}

// WithWatchdog starts the lease's watchdog as soon as the lease is taken; see
// Lease.KeepAlive.
func WithWatchdog() Option {
	return func(o *options) error { o.watchdog = true; return nil }
}

// WithBackoff sets the bounds of Lock's fallback wait between attempts, which
// doubles from min to max, with jitter, and never exceeds the holder's remaining
// TTL. Defaults: 8ms and 500ms. A release message ends the wait early.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max < min {
			return fmt.Errorf("locking: WithBackoff: need 0 < min <= max, got min %v, max %v", min, max)
		}
		o.minBackoff, o.maxBackoff = min, max
		return nil
	}
}

// minTTL is the shortest lease: below it, the drift margin eats the lease.
const minTTL = 10 * time.Millisecond

func checkTTL(op string, ttl time.Duration) error {
	if ttl < minTTL {
		return fmt.Errorf("locking: %s: ttl must be at least %v, got %v", op, minTTL, ttl)
	}
	return nil
}

func (c *Client) prepare(op, key string, ttl time.Duration, opts []Option) (options, []string, error) {
	o := defaultOptions()
	if key == "" {
		return o, nil, fmt.Errorf("locking: %s: %w: empty key", op, ErrInvalidKey)
	}
	if err := checkTTL(op, ttl); err != nil {
		return o, nil, err
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, nil, err
		}
	}
	keys := []string{key}
	if o.fencing {
		fence, err := derivedKey(key, "fence")
		if err != nil {
			return o, nil, fmt.Errorf("locking: %s with fencing: %w", op, err)
		}
		keys = append(keys, fence)
	}
	return o, keys, nil
}

// Obtain tries once to take key for ttl. It returns ErrNotObtained when another
// owner holds the key. One round trip; it blocks until Redis answers or ctx
// ends. ttl is counted in whole milliseconds and must be at least 10ms.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lease, error) {
	o, keys, err := c.prepare("Obtain", key, ttl, opts)
	if err != nil {
		return nil, err
	}
	l, _, err := c.try(ctx, keys, newToken(), ttl, o)
	return l, err
}

// try runs the obtain script once. On ErrNotObtained it also returns the
// holder's remaining TTL (-1 when the key has none).
func (c *Client) try(ctx context.Context, keys []string, token string, ttl time.Duration, o options) (*Lease, time.Duration, error) {
	fencing := "0"
	if o.fencing {
		fencing = "1"
	}
	sent := time.Now()
	res, err := obtainScript.Run(ctx, c.rdb, keys, token, ttl.Milliseconds(), fencing).Int64Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("locking: obtain %q: %w", keys[0], err)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("locking: obtain %q: unexpected reply %v", keys[0], res)
	}
	if res[0] != 1 {
		return nil, time.Duration(res[1]) * time.Millisecond, ErrNotObtained
	}
	l := newLease(c, keys[0], token, res[1], ttl, sent, ctx)
	if o.watchdog {
		_ = l.KeepAlive() // cannot fail on a fresh lease
	}
	return l, 0, nil
}

// Lock takes key for ttl, waiting while another owner holds it. It blocks until
// it has the key or ctx ends, and then returns ctx.Err() with nothing left
// behind: no key, no subscription, no goroutine.
//
// A free key costs one round trip. Otherwise Lock subscribes to the key's
// release channel and waits for a release message, retrying after a jittered
// backoff (see WithBackoff) capped by the holder's remaining TTL, in case a
// message is missed or the holder's key simply expires. It never polls at a
// fixed interval.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lease, error) {
	o, keys, err := c.prepare("Lock", key, ttl, opts)
	if err != nil {
		return nil, err
	}
	token := newToken() // one token for every attempt, so a retried script is recognised
	l, _, err := c.try(ctx, keys, token, ttl, o)
	if !errors.Is(err, ErrNotObtained) {
		return l, c.cleanupOnError(ctx, keys[0], token, err)
	}

	ps := c.rdb.Subscribe(ctx, releaseChannel(key))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription is confirmed
		return nil, c.cleanupOnError(ctx, keys[0], token, fmt.Errorf("locking: Lock %q: subscribe: %w", key, err))
	}
	released := ps.Channel()

	backoff := o.minBackoff
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		// Try again now that the subscription is in place: a release between
		// the first attempt and the subscription would otherwise be missed.
		l, holderTTL, err := c.try(ctx, keys, token, ttl, o)
		if !errors.Is(err, ErrNotObtained) {
			return l, c.cleanupOnError(ctx, keys[0], token, err)
		}
		timer.Reset(waitFor(backoff, holderTTL))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-released:
			timer.Stop() // go.mod says go >= 1.23: no stale tick after Stop
		case <-timer.C:
			backoff = min(2*backoff, o.maxBackoff)
		}
	}
}

// waitFor is a jittered backoff in [b/2, b], or the holder's remaining TTL
// (plus a millisecond) when that is shorter.
func waitFor(backoff, holderTTL time.Duration) time.Duration {
	d := backoff/2 + mrand.N(backoff/2+1)
	if holderTTL >= 0 && holderTTL+time.Millisecond < d {
		d = holderTTL + time.Millisecond
	}
	return d
}

// cleanupOnError deletes key if an attempt that failed on the network or on
// ctx did in fact take it, so that Lock leaves nothing behind. It returns err.
func (c *Client) cleanupOnError(ctx context.Context, key, token string, err error) error {
	if err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_ = releaseScript.Run(rctx, c.rdb, []string{key}, token, releaseChannel(key)).Err()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return err
}

// newToken returns 128 bits from crypto/rand, base64url-encoded (22 characters).
func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

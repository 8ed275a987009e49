package locking

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/rediskit"
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

// minTTL is the shortest lease: below it, the drift margin eats the lease.
const minTTL = 10 * time.Millisecond

func checkTTL(op string, ttl time.Duration) error {
	if ttl < minTTL {
		return fmt.Errorf("locking: %s: ttl must be at least %v, got %v", op, minTTL, ttl)
	}
	return nil
}

// prepare validates the arguments every acquisition shares.
func prepare(op, key string, ttl time.Duration, opts []Option) (options, error) {
	o := defaultOptions()
	if key == "" {
		return o, fmt.Errorf("locking: %s: %w: empty key", op, ErrInvalidKey)
	}
	if err := checkTTL(op, ttl); err != nil {
		return o, err
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// stringHold is the plain lease: a string key whose value is the token.
type stringHold struct {
	rdb     RedisClient
	key     string
	token   string
	channel string
	unlock  []string // the release script's keys: releaseKeys(key)
}

func (h stringHold) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	n, err := extendScript.Run(ctx, h.rdb, []string{h.key}, h.token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (h stringHold) release(ctx context.Context) (bool, error) {
	n, err := releaseScript.Run(ctx, h.rdb, h.unlock, h.token, h.channel, receiptTTL.Milliseconds()).Int64()
	return n == 1, err
}

func (h stringHold) pttl(ctx context.Context) (int64, error) {
	return pttlScript.Run(ctx, h.rdb, []string{h.key}, h.token).Int64()
}

// mutexAttempt returns the attempt function of a plain lease on key.
func (c *Client) mutexAttempt(key string, ttl time.Duration, o options) (attempt, func(context.Context), error) {
	keys := []string{key}
	fencing := "0"
	if o.fencing {
		fence, err := derivedKey(key, "fence")
		if err != nil {
			return nil, nil, fmt.Errorf("locking: fencing: %w", err)
		}
		keys, fencing = append(keys, fence), "1"
	}
	// One token for every attempt, so that a retried script is recognised.
	h := stringHold{rdb: c.rdb, key: key, token: rediskit.NewToken(), channel: releaseChannel(key), unlock: releaseKeys(key)}
	try := func(ctx context.Context) (*Lease, time.Duration, error) {
		sent := time.Now()
		res, err := obtainScript.Run(ctx, c.rdb, keys, h.token, ttl.Milliseconds(), fencing).Int64Slice()
		if err != nil {
			return nil, 0, fmt.Errorf("locking: obtain %q: %w", key, err)
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("locking: obtain %q: unexpected reply %v", key, res)
		}
		if res[0] != 1 {
			return nil, time.Duration(res[1]) * time.Millisecond, ErrNotObtained
		}
		return newLease(h, key, h.token, res[1], ttl, sent, ctx), 0, nil
	}
	// An attempt that failed on the network may still have taken the key.
	undo := func(ctx context.Context) { _, _ = h.release(ctx) }
	return try, undo, nil
}

// Obtain tries once to take key for ttl. It returns ErrNotObtained when another
// owner holds the key. One round trip; it blocks until Redis answers or ctx
// ends. ttl is counted in whole milliseconds and must be at least 10ms.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lease, error) {
	o, err := prepare("Obtain", key, ttl, opts)
	if err != nil {
		return nil, err
	}
	try, undo, err := c.mutexAttempt(key, ttl, o)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, releaseChannel(key), o, false, try, undo)
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
	o, err := prepare("Lock", key, ttl, opts)
	if err != nil {
		return nil, err
	}
	try, undo, err := c.mutexAttempt(key, ttl, o)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, releaseChannel(key), o, true, try, undo)
}

package locking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slotcron/slotcron/internal/rediskit"
)

// Reentrant is a lock that one owner may hold several times over, as
// Redisson's RLock: a hash that names the owner and each of its holds, each
// hold by a token of its own. Go has no thread identity, so the owner is
// explicit: every caller that passes the same owner ID shares the lock.
//
// Each hold is a *Lease; releasing it gives up that one hold, and the key is
// deleted (and waiters woken) when the last is given up. A hold's release
// sent again (its reply lost), or of a hold that expired, gives up no other
// hold. Every hold raises
// the hash's TTL to at least its own, never lowers it; when the hash expires,
// every hold ends. Use the same TTL for every hold of one lock.
type Reentrant struct {
	c       *Client
	key     string
	owner   string
	channel string
	unlock  []string // the unlock script's keys: releaseKeys(key)
}

// Reentrant returns the reentrant lock on key for owner. It sends nothing.
func (c *Client) Reentrant(key, owner string) *Reentrant {
	return &Reentrant{c: c, key: key, owner: owner, channel: releaseChannel(key), unlock: releaseKeys(key)}
}

// TryLock takes one hold if the lock is free or already the owner's, and
// returns ErrNotObtained when another owner holds it. One round trip.
// WithFencing is not supported and returns an error.
func (r *Reentrant) TryLock(ctx context.Context, ttl time.Duration, opts ...Option) (*Lease, error) {
	return r.lock(ctx, "Reentrant.TryLock", ttl, false, opts)
}

// Lock takes one hold, waiting while another owner holds the lock, as
// Client.Lock does. It blocks until it holds or ctx ends.
func (r *Reentrant) Lock(ctx context.Context, ttl time.Duration, opts ...Option) (*Lease, error) {
	return r.lock(ctx, "Reentrant.Lock", ttl, true, opts)
}

func (r *Reentrant) lock(ctx context.Context, op string, ttl time.Duration, wait bool, opts []Option) (*Lease, error) {
	o, err := prepare(op, r.key, ttl, opts)
	if err != nil {
		return nil, err
	}
	if r.owner == "" {
		return nil, fmt.Errorf("locking: %s: empty owner ID", op)
	}
	if o.fencing {
		return nil, fmt.Errorf("locking: %s: WithFencing is not supported by the reentrant lock", op)
	}
	// One token for every attempt, so that a retried script adds no second hold.
	h := reentrantHold{r: r, token: rediskit.NewToken()}
	try := func(ctx context.Context) (*Lease, time.Duration, error) {
		sent := time.Now()
		res, err := reentrantLockScript.Run(ctx, r.c.rdb, []string{r.key}, r.owner, ttl.Milliseconds(), h.token).Int64Slice()
		if err != nil {
			return nil, 0, fmt.Errorf("locking: %s %q: %w", op, r.key, err)
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("locking: %s %q: unexpected reply %v", op, r.key, res)
		}
		if res[0] != 1 {
			return nil, time.Duration(res[1]) * time.Millisecond, ErrNotObtained
		}
		return newLease(h, r.key, r.owner, 0, ttl, sent, ctx), 0, nil
	}
	// An attempt that failed on the network may still have taken its hold:
	// giving it up touches no other hold.
	undo := func(ctx context.Context) { _, _ = h.release(ctx) }
	return r.c.acquire(ctx, r.channel, o, wait, try, undo)
}

// Holds returns how many holds the owner has on the lock now (0 when none).
// One round trip.
func (r *Reentrant) Holds(ctx context.Context) (int, error) {
	res, err := reentrantPTTLScript.Run(ctx, r.c.rdb, []string{r.key}, r.owner, "").Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("locking: Reentrant.Holds %q: %w", r.key, err)
	}
	if len(res) != 2 {
		return 0, errors.New("locking: Reentrant.Holds: unexpected reply")
	}
	return int(res[1]), nil
}

// reentrantHold is one hold of a reentrant lock, by its own token (the
// Lease's Token is the owner ID).
type reentrantHold struct {
	r     *Reentrant
	token string
}

func (h reentrantHold) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	n, err := reentrantExtendScript.Run(ctx, h.r.c.rdb, []string{h.r.key}, h.r.owner, ttl.Milliseconds(), h.token).Int64()
	return n == 1, err
}

func (h reentrantHold) release(ctx context.Context) (bool, error) {
	n, err := reentrantUnlockScript.Run(ctx, h.r.c.rdb, h.r.unlock, h.r.owner, h.r.channel, h.token, receiptTTL.Milliseconds()).Int64()
	return n >= 0, err
}

func (h reentrantHold) pttl(ctx context.Context) (int64, error) {
	res, err := reentrantPTTLScript.Run(ctx, h.r.c.rdb, []string{h.r.key}, h.r.owner, h.token).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, errors.New("unexpected reply")
	}
	return res[0], nil
}

package locking

import (
	"context"
	"fmt"
	"time"

	"github.com/slotcron/slotcron/internal/rediskit"
)

// RWMutex is a read-write lock: many readers or one writer. It is one hash per
// lock, so every script touches one cluster slot. Each holder has its own
// field with its own token and expiry, kept on Redis's clock (TIME) and pruned
// inside every script: a reader can neither release nor extend another
// reader's hold, and an expired holder blocks nobody. The lock never trusts a
// client's clock.
//
// By default a writer that waits blocks new readers, so that a steady stream of
// readers cannot starve it: readers that arrive while it waits queue behind
// it. PreferReaders turns that off.
type RWMutex struct {
	c             *Client
	key           string
	channel       string
	unlock        []string // the unlock script's keys: releaseKeys(key)
	preferReaders bool
}

// RWOption configures an RWMutex.
type RWOption func(*RWMutex)

// PreferReaders lets readers in while a writer waits. Readers then never wait
// for a writer that has not got the lock yet, but a steady stream of readers
// can keep a writer out for ever.
func PreferReaders() RWOption {
	return func(m *RWMutex) { m.preferReaders = true }
}

// RWMutex returns the read-write lock on key. It sends nothing.
func (c *Client) RWMutex(key string, opts ...RWOption) *RWMutex {
	m := &RWMutex{c: c, key: key, channel: releaseChannel(key), unlock: releaseKeys(key)}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// TryRLock takes a read hold if no writer holds the lock (or, by default,
// waits for it), and returns ErrNotObtained otherwise. One round trip.
func (m *RWMutex) TryRLock(ctx context.Context, ttl time.Duration, opts ...Option) (*Lease, error) {
	return m.lock(ctx, "RWMutex.TryRLock", "r", ttl, false, opts)
}

// RLock takes a read hold, waiting while a writer holds the lock or waits for
// it. It blocks until it holds or ctx ends; see Client.Lock for how it waits.
func (m *RWMutex) RLock(ctx context.Context, ttl time.Duration, opts ...Option) (*Lease, error) {
	return m.lock(ctx, "RWMutex.RLock", "r", ttl, true, opts)
}

// TryLock takes the write hold if nobody holds the lock, and returns
// ErrNotObtained otherwise. It does not mark itself as waiting. One round trip.
func (m *RWMutex) TryLock(ctx context.Context, ttl time.Duration, opts ...Option) (*Lease, error) {
	return m.lock(ctx, "RWMutex.TryLock", "w", ttl, false, opts)
}

// Lock takes the write hold, waiting while readers or another writer hold the
// lock. While it waits, it marks itself as waiting, which by default blocks new
// readers; it withdraws the mark if ctx ends first. It blocks until it holds
// or ctx ends.
func (m *RWMutex) Lock(ctx context.Context, ttl time.Duration, opts ...Option) (*Lease, error) {
	return m.lock(ctx, "RWMutex.Lock", "w", ttl, true, opts)
}

func (m *RWMutex) lock(ctx context.Context, op, kind string, ttl time.Duration, wait bool, opts []Option) (*Lease, error) {
	o, err := prepare(op, m.key, ttl, opts)
	if err != nil {
		return nil, err
	}
	if o.fencing {
		return nil, fmt.Errorf("locking: %s: WithFencing is not supported by the read-write lock", op)
	}
	h := rwHold{m: m, token: rediskit.NewToken(), kind: kind}
	script, args := rwRLockScript, []any{h.token, ttl.Milliseconds(), "1"}
	if m.preferReaders {
		args[2] = "0"
	}
	var undo func(context.Context)
	if kind == "w" {
		// The waiting mark must outlive the longest wait between two attempts.
		mark := int64(0)
		if wait && !m.preferReaders {
			mark = (2*o.maxBackoff + 100*time.Millisecond).Milliseconds()
		}
		script, args = rwWLockScript, []any{h.token, ttl.Milliseconds(), mark}
		undo = func(ctx context.Context) {
			_, _ = h.release(ctx)
			_ = rwUnwaitScript.Run(ctx, m.c.rdb, []string{m.key}, h.token, m.channel).Err()
		}
	} else {
		undo = func(ctx context.Context) { _, _ = h.release(ctx) }
	}
	try := func(ctx context.Context) (*Lease, time.Duration, error) {
		sent := time.Now()
		res, err := script.Run(ctx, m.c.rdb, []string{m.key}, args...).Int64Slice()
		if err != nil {
			return nil, 0, fmt.Errorf("locking: %s %q: %w", op, m.key, err)
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("locking: %s %q: unexpected reply %v", op, m.key, res)
		}
		if res[0] != 1 {
			return nil, time.Duration(res[1]) * time.Millisecond, ErrNotObtained
		}
		return newLease(h, m.key, h.token, 0, ttl, sent, ctx), 0, nil
	}
	return m.c.acquire(ctx, m.channel, o, wait, try, undo)
}

// rwHold is one read or write hold, named by its own token.
type rwHold struct {
	m     *RWMutex
	token string
	kind  string // "r" or "w"
}

func (h rwHold) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	n, err := rwExtendScript.Run(ctx, h.m.c.rdb, []string{h.m.key}, h.token, h.kind, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (h rwHold) release(ctx context.Context) (bool, error) {
	n, err := rwUnlockScript.Run(ctx, h.m.c.rdb, h.m.unlock, h.token, h.kind, h.m.channel, receiptTTL.Milliseconds()).Int64()
	return n >= 0, err
}

func (h rwHold) pttl(ctx context.Context) (int64, error) {
	return rwPTTLScript.Run(ctx, h.m.c.rdb, []string{h.m.key}, h.token, h.kind).Int64()
}

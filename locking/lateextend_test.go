package locking_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// loseAnswer marks a context whose call's answer the lostAnswer hook drops.
type loseAnswer struct{}

// lostAnswer holds a marked call back from Redis (its caller sees a network
// error, as when an answer is lost) and keeps the command, so that the test
// can deliver it later: an unanswered request that reaches Redis late, after
// the caller's next request has been answered on another connection.
type lostAnswer struct {
	processOnly
	mu   sync.Mutex
	args []any
}

func (h *lostAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(loseAnswer{}) == nil {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.args = append([]any(nil), cmd.Args()...)
		h.mu.Unlock()
		return errors.New("the answer was lost")
	}
}

// resend sends the kept command, as a late copy of it would reach Redis.
func (h *lostAnswer) resend(t *testing.T, rdb *redis.Client) {
	t.Helper()
	h.mu.Lock()
	args := h.args
	h.mu.Unlock()
	if args == nil {
		t.Fatal("no command was kept")
	}
	if err := rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("resending %v: %v", args[0], err)
	}
}

// TestALateShorterExtendCutsNoTTL: an Extend with a shorter TTL gets no
// answer; a later Extend with a longer one is confirmed, and the lease counts
// on it. If the first then reaches Redis (it was sent, only its answer was
// lost, or it waited in a socket), it must not cut the hold's TTL below what
// the lease counts on: another client would take the key while the lease
// still reports it held. The hold's expiry in Redis must stay at or past the
// lease's Deadline, for every kind of hold.
func TestALateShorterExtendCutsNoTTL(t *testing.T) {
	const (
		short = 500 * time.Millisecond
		long  = 20 * time.Second
	)
	for name, obtain := range holdKinds(time.Second) {
		t.Run(name, func(t *testing.T) {
			srv, rdb, _ := setup(t)
			ctx := context.Background()
			key := srv.Key("late")
			lost := &lostAnswer{}
			rdb.AddHook(lost)
			l, err := obtain(ctx, rdb, key)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			if err := l.Extend(context.WithValue(ctx, loseAnswer{}, true), short); err == nil {
				t.Fatal("Extend whose answer was lost returned no error")
			}
			if err := l.Extend(ctx, long); err != nil {
				t.Fatalf("Extend(%v): %v", long, err)
			}
			lost.resend(t, srv.Client())
			left, err := l.TTL(ctx)
			if err != nil {
				t.Fatalf("TTL after the late Extend(%v): %v", short, err)
			}
			if expiry := time.Now().Add(left); expiry.Before(l.Deadline()) {
				t.Errorf("the late Extend(%v) cut the hold's TTL to %v: Redis expires it %v before the lease's Deadline",
					short, left, l.Deadline().Sub(expiry).Round(time.Millisecond))
			}
		})
	}
}

// holdKinds obtains a hold of each kind on key for ttl: the plain lease, the
// reentrant lock's, the read-write lock's read and write holds, and a
// Redlock's (of one node, rdb).
func holdKinds(ttl time.Duration) map[string]func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
	return map[string]func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error){
		"lease": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).Obtain(ctx, key, ttl)
		},
		"reentrant": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).Reentrant(key, "owner").TryLock(ctx, ttl)
		},
		"read hold": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).RWMutex(key).TryRLock(ctx, ttl)
		},
		"write hold": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).RWMutex(key).TryLock(ctx, ttl)
		},
		"redlock of one node": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			rl, err := locking.NewRedlock([]locking.RedisClient{rdb}, locking.WithRetries(0, 0))
			if err != nil {
				return nil, err
			}
			return rl.Obtain(ctx, key, ttl)
		},
	}
}

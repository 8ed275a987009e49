package locking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// TestAReleaseSentAgainIsNotNotHeld: the answer to a Release is lost and
// go-redis sends the script again (sentAgain). The first run released the
// hold; the second found it gone and answered ErrNotHeld, as if the lease
// had been lost, for every kind of hold. A release now leaves its token in
// a receipt that the second run finds. A hold that really was lost still
// answers ErrNotHeld (TestForeignTokenCannotReleaseOrExtend and its kin).
func TestAReleaseSentAgainIsNotNotHeld(t *testing.T) {
	kinds := map[string]func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error){
		"lease": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).Obtain(ctx, key, time.Minute)
		},
		"reentrant": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).Reentrant(key, "owner").TryLock(ctx, time.Minute)
		},
		"read hold": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).RWMutex(key).TryRLock(ctx, time.Minute)
		},
		"write hold": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			return locking.New(rdb).RWMutex(key).TryLock(ctx, time.Minute)
		},
		"redlock of one node": func(ctx context.Context, rdb redis.UniversalClient, key string) (*locking.Lease, error) {
			rl, err := locking.NewRedlock([]locking.RedisClient{rdb}, locking.WithRetries(0, 0))
			if err != nil {
				return nil, err
			}
			return rl.Obtain(ctx, key, time.Minute)
		},
	}
	for name, obtain := range kinds {
		t.Run(name, func(t *testing.T) {
			srv, rdb, _ := setup(t)
			ctx := context.Background()
			again := &sentAgain{}
			prdb := redis.NewClient(srv.Options())
			defer prdb.Close()
			prdb.AddHook(again)
			// Two keys: one built with locking.Key (a hash tag), one without.
			for _, key := range []string{locking.Key(srv.Key("app"), "resent"), srv.Key("resent")} {
				// Load the scripts, so that the armed Release is one EVALSHA.
				warm, err := obtain(ctx, prdb, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := warm.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l, err := obtain(ctx, prdb, key)
				if err != nil {
					t.Fatal(err)
				}
				again.armed.Store(true)
				err = l.Release(ctx)
				if again.armed.Load() {
					t.Fatal("the Release sent no script: the test shows nothing")
				}
				if err != nil {
					t.Errorf("%s: Release sent again: %v, want nil: the first run released it", key, err)
				}
				if cause := context.Cause(l.Context()); errors.Is(cause, locking.ErrLeaseLost) {
					t.Errorf("%s: the lease ended as lost: %v", key, cause)
				}
				next, err := obtain(ctx, rdb, key)
				if err != nil {
					t.Fatalf("%s: the key is not free after the Release: %v", key, err)
				}
				if err := next.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

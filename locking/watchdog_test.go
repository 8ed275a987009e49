package locking_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

// TestWatchdogHoldsLeaseForThreeTTLs: the watchdog renews every TTL/3, so the
// key holds the token, and the lease stays live, over several TTLs.
func TestWatchdogHoldsLeaseForThreeTTLs(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("held")
	l, err := lk.Obtain(ctx, key, keepAliveTTL, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	keptAlive(t, l, 3*keepAliveTTL, tokenAt(rdb, key, l.Token()))
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("key survived Release")
	}
}

// tokenAt checks that key holds token.
func tokenAt(rdb *redis.Client, key, token string) func() error {
	return func() error {
		got, err := rdb.Get(context.Background(), key).Result()
		if err != nil || got != token {
			return fmt.Errorf("the key holds %q (%v), not the token", got, err)
		}
		return nil
	}
}

func TestLossDetectedWithinOneTTL(t *testing.T) {
	const ttl = keepAliveTTL // load cannot end the lease before the fault
	faults := map[string]func(ctx context.Context, rdb *redis.Client, key string) error{
		"key deleted": func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.Del(ctx, key).Err()
		},
		"key overwritten": func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.Set(ctx, key, "intruder", time.Minute).Err()
		},
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			srv, rdb, lk := setup(t)
			ctx := context.Background()
			key := srv.Key("victim")
			l, err := lk.Obtain(ctx, key, ttl, locking.WithWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			time.Sleep(ttl / 2) // a renewal or so has happened
			if err := l.Context().Err(); err != nil {
				t.Fatalf("lease ended before the fault: %v", context.Cause(l.Context()))
			}
			if err := fault(ctx, rdb, key); err != nil {
				t.Fatal(err)
			}
			// A renewal that Redis confirmed before the fault was sent
			// before the fault call returned.
			lossWithin(t, l, time.Now(), ttl)
			if got := rdb.Get(ctx, key).Val(); name == "key overwritten" && got != "intruder" {
				t.Fatalf("the lost lease touched the new owner's key: %q", got)
			}
		})
	}
}

// TestLossDetectedWhenServerPaused freezes Redis past the TTL. The watchdog's
// renewal hangs; the lease must still end on time, whatever the client's socket
// timeouts, so it runs with go-redis defaults (3s read timeout, context
// deadlines not applied to the socket) as well as with the test options.
func TestLossDetectedWhenServerPaused(t *testing.T) {
	const ttl = keepAliveTTL // load cannot end the lease before the pause
	clients := map[string]func(*redistest.Server) *redis.Client{
		"context deadlines on the socket": func(s *redistest.Server) *redis.Client { return s.Client() },
		"go-redis defaults": func(s *redistest.Server) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: s.Addr()})
		},
	}
	for name, newClient := range clients {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartOwned(t)
			rdb := newClient(srv)
			defer rdb.Close()
			lk := locking.New(rdb)
			ctx := context.Background()
			l, err := lk.Obtain(ctx, "paused", ttl, locking.WithWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(ttl / 2)
			if err := l.Context().Err(); err != nil {
				t.Fatalf("lease ended before the pause: %v", context.Cause(l.Context()))
			}
			srv.Pause()
			// The last renewal Redis confirmed was sent before it stopped,
			// so before Pause returned.
			lossWithin(t, l, time.Now(), ttl)
			srv.Resume()
			if err := l.Release(ctx); err != nil && !errors.Is(err, locking.ErrNotHeld) {
				t.Fatalf("Release after loss: %v", err)
			}
		})
	}
}

func TestNoWatchdogMeansTheLeaseEndsWithItsTTL(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	const ttl = 100 * time.Millisecond
	before := time.Now()
	l, err := lk.Obtain(ctx, srv.Key("short"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	// The lease counts its TTL from when Obtain sent its request: after
	// before, and before Obtain returned.
	obtained := time.Now()
	lossWithin(t, l, obtained, ttl)
	if took := time.Since(before); took < ttl*9/10 {
		t.Fatalf("lease ended after %v, before its TTL of %v", took, ttl)
	}
	// The lease ends locally a drift margin before Redis expires the key; once
	// Redis has expired it too (it set the TTL before Obtain returned),
	// Release finds nothing of its own.
	time.Sleep(time.Until(obtained.Add(ttl + 20*time.Millisecond)))
	if err := l.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("Release of an expired lease: %v, want ErrNotHeld", err)
	}
}

func TestKeepAliveStartsOneWatchdog(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("keepalive")
	l, err := lk.Obtain(ctx, key, keepAliveTTL)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.KeepAlive(); err != nil {
			t.Fatal(err)
		}
	}
	keptAlive(t, l, 2*keepAliveTTL, tokenAt(rdb, key, l.Token()))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// goleak in TestMain fails the package if a second watchdog outlived Release.
}

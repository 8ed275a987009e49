package locking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

func TestWatchdogHoldsShortLeaseForTwoSeconds(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("held")
	const ttl = 300 * time.Millisecond
	l, err := lk.Obtain(ctx, key, ttl, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	samples := 0
	for time.Now().Before(deadline) {
		if got := rdb.Get(ctx, key).Val(); got != l.Token() {
			t.Fatalf("after %d samples the key holds %q, not the token", samples, got)
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("lease ended: %v", context.Cause(l.Context()))
		}
		samples++
		time.Sleep(25 * time.Millisecond)
	}
	if samples < 40 {
		t.Fatalf("only %d samples in 2s", samples)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("key survived Release")
	}
}

// lossWithin asserts that the lease ends as lost within limit, and returns how long it took.
func lossWithin(t *testing.T, l *locking.Lease, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(limit + time.Second):
		t.Fatalf("lease not reported lost %v after the fault", limit+time.Second)
	}
	took := time.Since(since)
	cause := context.Cause(l.Context())
	if !errors.Is(cause, locking.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", cause)
	}
	if took > limit {
		t.Fatalf("loss reported after %v, want within %v (cause: %v)", took, limit, cause)
	}
	t.Logf("loss reported after %v: %v", took.Round(time.Millisecond), cause)
	return took
}

func TestLossDetectedWithinOneTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
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
			at := time.Now()
			if err := fault(ctx, rdb, key); err != nil {
				t.Fatal(err)
			}
			lossWithin(t, l, at, ttl)
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
	const ttl = 300 * time.Millisecond
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
			at := time.Now()
			srv.Pause()
			lossWithin(t, l, at, ttl)
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
	at := time.Now()
	l, err := lk.Obtain(ctx, srv.Key("short"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	took := lossWithin(t, l, at, ttl)
	if took < ttl*9/10 {
		t.Fatalf("lease ended after %v, before its TTL of %v", took, ttl)
	}
	// The lease ends locally a drift margin before Redis expires the key; once
	// Redis has expired it too, Release finds nothing of its own.
	time.Sleep(time.Until(at.Add(ttl + 20*time.Millisecond)))
	if err := l.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("Release of an expired lease: %v, want ErrNotHeld", err)
	}
}

func TestKeepAliveStartsOneWatchdog(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("keepalive")
	l, err := lk.Obtain(ctx, key, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.KeepAlive(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if got := rdb.Get(ctx, key).Val(); got != l.Token() {
		t.Fatalf("key holds %q after 500ms of KeepAlive", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// goleak in TestMain fails the package if a second watchdog outlived Release.
}

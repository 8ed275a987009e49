package locking_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

// TestFenceGrowsAfterRedisLosesData: fences 1, 2, 3... came from a counter
// alone, so after Redis restarted without persistence (or failed over to a
// replica that lagged) the next lease got a fence that an earlier owner had
// had, and a store that refuses lower fences let the paused former owner's
// writes through. A fence is now at least Redis's clock in µs.
func TestFenceGrowsAfterRedisLosesData(t *testing.T) {
	srv := redistest.StartOwned(t) // restarted below: never a shared REDIS_ADDR
	lk := locking.New(srv.Client())
	ctx := context.Background()
	key := srv.Key("fence-restart")
	var last int64
	for range 3 {
		l, err := lk.Obtain(ctx, key, time.Minute, locking.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d: not growing", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart()
	var l *locking.Lease
	var err error
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if l, err = lk.Obtain(ctx, key, time.Minute, locking.WithFencing()); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Fence() <= last {
		t.Fatalf("fence after a Redis restart: %d, not above the last one before it (%d)", l.Fence(), last)
	}
}

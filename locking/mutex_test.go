package locking_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// waitForSubscriber returns once some client subscribes to a channel that
// mentions key (the release channel).
func waitForSubscriber(t *testing.T, rdb *redis.Client, key string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		chans := rdb.PubSubChannels(context.Background(), "*"+key+"*").Val()
		n := 0
		if len(chans) > 0 {
			n = int(rdb.PubSubNumSub(context.Background(), chans...).Val()[chans[0]])
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers on %v after 5s, want %d", n, chans, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestLockWakesOnRelease measures the handoff from Release to the waiter's Lock
// returning. The backoff is 5s..10s, so a waiter that relied on its timer
// would wait at least 2.5s from the moment it started; the release message
// must wake it before then, in every one of the runs.
func TestLockWakesOnRelease(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("handoff")
	const minBackoff, maxBackoff = 5 * time.Second, 10 * time.Second
	var latencies []time.Duration
	for range 15 {
		holder, err := lk.Obtain(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *locking.Lease, 1)
		errc := make(chan error, 1)
		launched := time.Now()
		go func() {
			l, err := lk.Lock(ctx, key, 30*time.Second, locking.WithBackoff(minBackoff, maxBackoff))
			got <- l
			errc <- err
		}()
		waitForSubscriber(t, rdb, key, 1)
		released := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := before(t, errc, launched.Add(minBackoff/2), "the waiter was not woken before its backoff could fire"); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		latencies = append(latencies, time.Since(released))
		waiter := <-got
		if err := waiter.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(latencies)
	median, worst := latencies[len(latencies)/2], latencies[len(latencies)-1]
	t.Logf("handoff over %d runs: median %v, max %v (least backoff %v)", len(latencies), median, worst, minBackoff/2)
}

func TestLockWaitsForExpiry(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("expiring")
	// A holder that dies without releasing: its key expires, nobody publishes.
	set := time.Now() // the key cannot expire before set+150ms
	if err := rdb.Set(ctx, key, "dead-owner", 150*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	// A waiter whose wait is not capped by the holder's TTL sleeps its
	// backoff: at least 2.5s from the start.
	const minBackoff, maxBackoff = 5 * time.Second, 10 * time.Second
	start := time.Now()
	got := make(chan *locking.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := lk.Lock(ctx, key, time.Second, locking.WithBackoff(minBackoff, maxBackoff))
		got <- l
		errc <- err
	}()
	if err := before(t, errc, start.Add(minBackoff/2), "Lock did not get a key that expired after 150ms before its backoff could fire: the wait is not capped by the holder's TTL"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(set)
	l := <-got
	defer l.Release(ctx)
	if took < 100*time.Millisecond {
		t.Fatalf("Lock took %v: it did not wait for the holder", took)
	}
}

func TestLockCancelLeavesNothingBehind(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("cancelled")
	holder, err := lk.Obtain(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	l, err := lk.Lock(wctx, key, 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) || l != nil {
		t.Fatalf("Lock on an expired context = %v, %v; want nil, context.DeadlineExceeded", l, err)
	}
	if got := rdb.Get(ctx, key).Val(); got != holder.Token() {
		t.Fatalf("the holder's key now holds %q", got)
	}
	waitForSubscriber(t, rdb, key, 0) // the waiter's subscription is gone
	// goleak in TestMain checks that no goroutine of the waiter survives.
}

func TestLockMutualExclusion(t *testing.T) {
	srv, _, lk := setup(t)
	key := srv.Key("mutex")
	const workers, rounds = 8, 5
	var (
		inside, maxInside, total atomic.Int32
		wg                       sync.WaitGroup
		errs                     = make(chan error, workers*rounds)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := lk.Lock(context.Background(), key, 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				total.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders at once", maxInside.Load())
	}
	if total.Load() != workers*rounds {
		t.Fatalf("%d critical sections, want %d", total.Load(), workers*rounds)
	}
}

package locking_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slotcron/slotcron/locking"
)

func TestReentrantHoldThreeReleaseThree(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("reentrant")
	r := lk.Reentrant(key, "worker-1")
	var holds []*locking.Lease
	for i := 1; i <= 3; i++ {
		l, err := r.TryLock(ctx, 5*time.Second)
		if err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		holds = append(holds, l)
		if n, _ := r.Holds(ctx); n != i {
			t.Fatalf("after hold %d the count is %d", i, n)
		}
	}
	for i, l := range holds {
		if rdb.Exists(ctx, key).Val() != 1 {
			t.Fatalf("key gone before release %d", i+1)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
		if n, _ := r.Holds(ctx); n != 2-i {
			t.Fatalf("after release %d the count is %d, want %d", i+1, n, 2-i)
		}
	}
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("key survived the third release")
	}
}

func TestReentrantRefusesAnotherOwner(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("reentrant-owner")
	a, b := lk.Reentrant(key, "a"), lk.Reentrant(key, "b")
	const holdTTL = 5 * time.Second
	first := time.Now() // a's holds cannot expire before first+holdTTL
	h1, err := a.TryLock(ctx, holdTTL)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := a.TryLock(ctx, holdTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, 5*time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("another owner at count 2: %v, want ErrNotObtained", err)
	}
	h1.Release(ctx)
	if _, err := b.TryLock(ctx, 5*time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("another owner at count 1: %v, want ErrNotObtained", err)
	}
	// b waits, and gets it when a's last hold goes.
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, 5*time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	h2.Release(ctx)
	// Only the release can free the lock before a's holds expire.
	if err := before(t, got, first.Add(holdTTL), "b did not get the lock before a's holds could expire: the release did not free it"); err != nil {
		t.Fatalf("b.Lock: %v", err)
	}
}

func TestReentrantForeignReleaseRejected(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("reentrant-foreign")
	// b's hold expires, a takes the lock: b's late release is foreign.
	late, err := lk.Reentrant(key, "b").TryLock(ctx, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(80 * time.Millisecond)
	mine, err := lk.Reentrant(key, "a").TryLock(ctx, 5*time.Second)
	if err != nil {
		t.Fatalf("a after b expired: %v", err)
	}
	defer mine.Release(ctx)
	if err := late.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("foreign release: %v, want ErrNotHeld", err)
	}
	if n, err := lk.Reentrant(key, "a").Holds(ctx); err != nil || n != 1 || rdb.HGet(ctx, key, "o").Val() != "a" {
		t.Fatalf("foreign release changed the hash: %v (a's holds %d, %v)", rdb.HGetAll(ctx, key).Val(), n, err)
	}
}

func TestReentrantExpiryEndsAllHolds(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("reentrant-expiry")
	r := lk.Reentrant(key, "owner")
	const ttl = 150 * time.Millisecond
	h1, err := r.TryLock(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	h1Obtained := time.Now()
	h2, err := r.TryLock(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	h2Obtained := time.Now()
	lossWithin(t, h1, h1Obtained, ttl)
	lossWithin(t, h2, h2Obtained, ttl)
	// Redis set the hash's TTL before the second TryLock returned.
	time.Sleep(time.Until(h2Obtained.Add(ttl + 20*time.Millisecond)))
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("hash outlived its TTL")
	}
	if n, _ := r.Holds(ctx); n != 0 {
		t.Fatalf("count after expiry = %d", n)
	}
	l, err := lk.Reentrant(key, "next").TryLock(ctx, time.Second)
	if err != nil {
		t.Fatalf("another owner after expiry: %v", err)
	}
	l.Release(ctx)
}

func TestReentrantWatchdog(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	r := lk.Reentrant(srv.Key("reentrant-watchdog"), "owner")
	l, err := r.TryLock(ctx, keepAliveTTL, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	keptAlive(t, l, 2*keepAliveTTL, func() error {
		if n, err := r.Holds(ctx); n != 1 || err != nil {
			return fmt.Errorf("count %d (%v), want 1", n, err)
		}
		return nil
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx, time.Second, locking.WithFencing()); err == nil {
		t.Fatal("WithFencing accepted by the reentrant lock")
	}
}

package locking_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

// The family suite runs every script of the package on one topology. On a
// Redis Cluster, a script whose keys straddle two hash slots fails with
// CROSSSLOT, and a release message published on one master must reach a
// waiter subscribed through another; each case fails on either.

func TestFamilyOnSingleServer(t *testing.T) {
	srv := redistest.Start(t)
	familySuite(t, srv.Client(), srv.Key)
}

func TestFamilyOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	familySuite(t, c.Client(), func(name string) string { return name })
}

// familyKeys are names that hash to different slots, so each case runs on
// every master of a cluster: untagged keys, and keys built with locking.Key.
func familyKeys(key func(string) string, base string) []string {
	var keys []string
	for i := range 6 {
		keys = append(keys, key(fmt.Sprintf("%s-%d", base, i)))
	}
	for i := range 3 {
		keys = append(keys, locking.Key(key("app"), fmt.Sprintf("%s-tagged-%d", base, i)))
	}
	return keys
}

func familySuite(t *testing.T, rdb locking.RedisClient, key func(string) string) {
	lk := locking.New(rdb)
	ctx := context.Background()

	t.Run("lease with fencing", func(t *testing.T) {
		for _, k := range familyKeys(key, "lease") {
			var fences []int64
			for range 2 {
				l, err := lk.Obtain(ctx, k, time.Second, locking.WithFencing())
				if err != nil {
					t.Fatalf("%s: Obtain: %v", k, err)
				}
				if err := l.Extend(ctx, 2*time.Second); err != nil {
					t.Fatalf("%s: Extend: %v", k, err)
				}
				if _, err := l.TTL(ctx); err != nil {
					t.Fatalf("%s: TTL: %v", k, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("%s: Release: %v", k, err)
				}
				fences = append(fences, l.Fence())
			}
			if fences[1] != fences[0]+1 {
				t.Fatalf("%s: fences %v", k, fences)
			}
		}
	})

	t.Run("watchdog", func(t *testing.T) {
		l, err := lk.Obtain(ctx, key("family-watchdog"), 60*time.Millisecond, locking.WithWatchdog())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := l.Context().Err(); err != nil {
			t.Fatalf("lease ended: %v", context.Cause(l.Context()))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pub/sub wake-up", func(t *testing.T) {
		for _, k := range familyKeys(key, "wake") {
			holder, err := lk.Obtain(ctx, k, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				l, err := lk.Lock(ctx, k, time.Second, locking.WithBackoff(5*time.Second, 10*time.Second))
				if err == nil {
					err = l.Release(ctx)
				}
				done <- err
			}()
			time.Sleep(30 * time.Millisecond) // the waiter subscribes
			holder.Release(ctx)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: waiter: %v", k, err)
				}
			case <-time.After(time.Second): // the fallback backoff is 2.5s..5s
				t.Fatalf("%s: the release message did not wake the waiter within 1s", k)
			}
		}
	})

	t.Run("reentrant", func(t *testing.T) {
		for _, k := range familyKeys(key, "reentrant") {
			r := lk.Reentrant(k, "owner")
			a, err := r.TryLock(ctx, time.Second)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			b, err := r.Lock(ctx, time.Second)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if err := a.Extend(ctx, 2*time.Second); err != nil {
				t.Fatalf("%s: Extend: %v", k, err)
			}
			if _, err := b.TTL(ctx); err != nil {
				t.Fatalf("%s: TTL: %v", k, err)
			}
			if err := a.Release(ctx); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if n, err := r.Holds(ctx); err != nil || n != 0 {
				t.Fatalf("%s: holds %d, %v", k, n, err)
			}
		}
	})

	t.Run("read-write", func(t *testing.T) {
		for _, k := range familyKeys(key, "rw") {
			rw := lk.RWMutex(k)
			r, err := rw.RLock(ctx, time.Second)
			if err != nil {
				t.Fatalf("%s: RLock: %v", k, err)
			}
			if err := r.Extend(ctx, 2*time.Second); err != nil {
				t.Fatalf("%s: Extend: %v", k, err)
			}
			if _, err := r.TTL(ctx); err != nil {
				t.Fatalf("%s: TTL: %v", k, err)
			}
			got := make(chan error, 1)
			go func() {
				w, err := rw.Lock(ctx, time.Second)
				if err == nil {
					err = w.Release(ctx)
				}
				got <- err
			}()
			time.Sleep(30 * time.Millisecond)
			if _, err := rw.TryRLock(ctx, time.Second); !errors.Is(err, locking.ErrNotObtained) {
				t.Fatalf("%s: a reader got in past a waiting writer: %v", k, err)
			}
			r.Release(ctx)
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("%s: writer: %v", k, err)
				}
			case <-time.After(time.Second):
				t.Fatalf("%s: writer not woken within 1s of the last reader leaving", k)
			}
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			r2, _ := rw.RLock(ctx, time.Second)
			_, err = rw.Lock(wctx, time.Second) // gives up: withdraws its mark
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: writer under a reader: %v", k, err)
			}
			r2.Release(ctx)
		}
	})
}

package locking_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// waitForWriterMark returns once a writer has marked itself as waiting on the
// read-write lock k (a "q:" field of its hash), failing after 5s.
func waitForWriterMark(t *testing.T, rdb locking.RedisClient, k string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second) // only a guard against a hang
	for {
		fields, err := rdb.Eval(context.Background(), "return redis.call('HKEYS', KEYS[1])", []string{k}).StringSlice()
		if err != nil {
			t.Fatalf("%s: HKEYS: %v", k, err)
		}
		for _, f := range fields {
			if strings.HasPrefix(f, "q:") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no waiting writer's mark after 5s: %v", k, fields)
		}
		time.Sleep(2 * time.Millisecond)
	}
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
			if fences[1] <= fences[0] {
				t.Fatalf("%s: fences %v", k, fences)
			}
		}
	})

	t.Run("watchdog", func(t *testing.T) {
		l, err := lk.Obtain(ctx, key("family-watchdog"), keepAliveTTL, locking.WithWatchdog())
		if err != nil {
			t.Fatal(err)
		}
		keptAlive(t, l, 2*keepAliveTTL, func() error {
			_, err := l.TTL(ctx)
			return err
		})
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
			// The waiter's fallback backoff cannot fire before 2.5s after it
			// starts: only the release message wakes it sooner.
			const minBackoff, maxBackoff = 5 * time.Second, 10 * time.Second
			done := make(chan error, 1)
			launched := time.Now()
			go func() {
				l, err := lk.Lock(ctx, k, time.Second, locking.WithBackoff(minBackoff, maxBackoff))
				if err == nil {
					err = l.Release(ctx)
				}
				done <- err
			}()
			time.Sleep(30 * time.Millisecond) // the waiter subscribes
			holder.Release(ctx)
			if err := before(t, done, launched.Add(minBackoff/2), k+": the release message did not wake the waiter before its backoff could fire"); err != nil {
				t.Fatalf("%s: waiter: %v", k, err)
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
			const readTTL = 2 * time.Second
			extended := time.Now() // r's hold cannot expire before extended+readTTL
			if err := r.Extend(ctx, readTTL); err != nil {
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
			waitForWriterMark(t, rdb, k)
			if _, err := rw.TryRLock(ctx, time.Second); !errors.Is(err, locking.ErrNotObtained) {
				t.Fatalf("%s: a reader got in past a waiting writer: %v", k, err)
			}
			r.Release(ctx)
			// Only the release can let the writer in before r's hold expires.
			if err := before(t, got, extended.Add(readTTL), k+": writer not in before the last reader's hold could expire: its release did not let the writer in"); err != nil {
				t.Fatalf("%s: writer: %v", k, err)
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

package locking_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

// BenchmarkObtainRelease is one Obtain and one Release of a free key: two
// round trips, the floor for a token-checked lock.
func BenchmarkObtainRelease(b *testing.B) {
	srv := redistest.Start(b)
	lk := locking.New(srv.Client())
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		key := srv.Key("bench-serial")
		for b.Loop() {
			l, err := lk.Obtain(ctx, key, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := srv.Key("bench-par-" + strconv.FormatInt(id.Add(1), 10))
			for pb.Next() {
				l, err := lk.Obtain(ctx, key, 10*time.Second)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkBaselineSetNX is the same client sending one plain SET NX PX and one
// DEL: what two round trips cost through go-redis, for comparison.
func BenchmarkBaselineSetNX(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	key := srv.Key("bench-baseline")
	for b.Loop() {
		if err := rdb.SetNX(ctx, key, "v", 10*time.Second).Err(); err != nil {
			b.Fatal(err)
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContendedHandoff has 4 goroutines taking turns on one key with Lock;
// ns/op is the time per critical section, handoff included.
func BenchmarkContendedHandoff(b *testing.B) {
	srv := redistest.Start(b)
	lk := locking.New(srv.Client())
	ctx := context.Background()
	key := srv.Key("bench-handoff")
	const workers = 4
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	n := int64(b.N)
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				l, err := lk.Lock(ctx, key, 10*time.Second)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkLockRedisTime obtains 100 free keys, then releases them, and
// reports what Redis spent running the scripts (INFO commandstats, on a
// server of its own) per Obtain and per Release: what a change to the
// scripts costs Redis. bench/ab-locks.sh runs it for two revisions,
// interleaved.
func BenchmarkLockRedisTime(b *testing.B) {
	srv := redistest.StartOwned(b)
	rdb := srv.Client()
	lk := locking.New(rdb)
	ctx := context.Background()
	const n = 100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = locking.Key(srv.Key("bench"), strconv.Itoa(i))
	}
	// scriptTime runs f and returns Redis's time in EVALSHA meanwhile.
	scriptTime := func(f func()) time.Duration {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		f()
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		d, ok := redistest.CommandTime(stats, "evalsha")
		if !ok {
			b.Fatalf("no evalsha time in INFO commandstats: %q", stats)
		}
		return d
	}
	leases := make([]*locking.Lease, n)
	obtain := func() {
		for i, k := range keys {
			l, err := lk.Obtain(ctx, k, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			leases[i] = l
		}
	}
	release := func() {
		for _, l := range leases {
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	obtain() // load the scripts: a first call is an EVAL
	release()
	var obtained, released time.Duration
	for b.Loop() {
		obtained += scriptTime(obtain)
		released += scriptTime(release)
	}
	calls := float64(n * b.N)
	b.ReportMetric(float64(obtained.Nanoseconds())/1e3/calls, "redis-us/obtain")
	b.ReportMetric(float64(released.Nanoseconds())/1e3/calls, "redis-us/release")
}

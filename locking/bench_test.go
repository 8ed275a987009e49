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

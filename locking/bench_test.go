package locking_test

import (
	"context"
	"strconv"
	"strings"
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

// BenchmarkClaimBatch claims one slot of each of 100 jobs in one Claim (one
// script call), first as the winner, then as a loser, then finishes the
// runs (not measured). It reports what
// Redis spent running the script, per claim (INFO commandstats, on a server
// of its own). Calls run back to back here, with Redis's caches warm; a
// scheduler ticking once a second finds them colder and pays more.
func BenchmarkClaimBatch(b *testing.B) {
	srv := redistest.StartOwned(b)
	rdb := srv.Client()
	ctx := context.Background()
	s, err := locking.NewSlots(rdb, "bench")
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Prepare(ctx); err != nil {
		b.Fatal(err)
	}
	const njobs = 100
	batch := func(slot time.Time, replica string) []locking.SlotClaim {
		claims := make([]locking.SlotClaim, njobs)
		for i := range claims {
			claims[i] = locking.SlotClaim{Kind: locking.ClaimLive, Job: "job" + strconv.Itoa(i), Slot: slot, Replica: replica,
				LeaseTTL: time.Minute, Retention: time.Hour, Deadline: time.Now().Add(time.Hour)}
		}
		return claims
	}
	var leases []*locking.SlotLease
	// scriptTime runs claims and returns Redis's time in EVALSHA for them.
	scriptTime := func(claims []locking.SlotClaim, want locking.Outcome) time.Duration {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		res, err := s.Claim(ctx, claims)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil || r.Outcome != want {
				b.Fatalf("claim: %+v, want %s", r, want)
			}
			if r.Lease != nil {
				leases = append(leases, r.Lease)
			}
		}
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		_, line, ok := strings.Cut(stats, "cmdstat_evalsha:")
		_, usec, _ := strings.Cut(line, "usec=")
		usec, _, _ = strings.Cut(usec, ",")
		n, err := strconv.ParseInt(usec, 10, 64)
		if !ok || err != nil {
			b.Fatalf("no EVALSHA time in INFO commandstats: %q", stats)
		}
		return time.Duration(n) * time.Microsecond
	}
	var won, lost time.Duration
	slot := time.Unix(1_700_000_000, 0)
	for b.Loop() {
		slot = slot.Add(time.Second)
		won += scriptTime(batch(slot, "r1"), locking.OutcomeWon)
		lost += scriptTime(batch(slot, "r2"), locking.OutcomeLost)
		reqs := make([]locking.FinishRequest, len(leases)) // free the job leases for the next slot
		for i, l := range leases {
			reqs[i] = locking.FinishRequest{Lease: l, State: locking.StateDone}
		}
		for _, err := range s.Finish(ctx, reqs) {
			if err != nil {
				b.Fatal(err)
			}
		}
		leases = leases[:0]
	}
	b.ReportMetric(float64(won.Microseconds())/float64(b.N*njobs), "redis-us/won-claim")
	b.ReportMetric(float64(lost.Microseconds())/float64(b.N*njobs), "redis-us/lost-claim")
}

package slotstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// BenchmarkClaimBatch claims one slot of each of 100 jobs in one Claim (one
// script call), first as the winner, then as a loser, then as a loser whose
// claims are contested (routing race), then peeks at the
// records as a hedged claim does (Peek: one MGET of every slot's record),
// then finishes the runs. It reports what Redis spent running the scripts,
// per claim and per finish (INFO commandstats, on a server of its own). Calls run back to back here, with Redis's caches warm; a
// scheduler ticking once a second finds them colder and pays more.
func BenchmarkClaimBatch(b *testing.B) {
	rdb, s := benchStore(b)
	ctx := context.Background()
	const njobs = 100
	batch := func(at time.Time, replica string) []slot.Claim { return benchClaims(njobs, at, replica) }
	var leases []slot.Lease
	// commandTime returns Redis's time in cmd since the last reset.
	commandTime := func(cmd string) time.Duration {
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		d, ok := redistest.CommandTime(stats, cmd)
		if !ok {
			b.Fatalf("no %s time in INFO commandstats: %q", cmd, stats)
		}
		return d
	}
	// peekTime peeks at the claims' records (what a hedged claim does
	// first) and returns Redis's time in MGET for them.
	peekTime := func(claims []slot.Claim) time.Duration {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		recs, err := s.Peek(ctx, claims)
		if err != nil || recs[0].State != slot.StateRunning {
			b.Fatalf("peek: %+v %v", recs, err)
		}
		return commandTime("mget")
	}
	// scriptTime runs claims and returns Redis's time in EVALSHA for them.
	scriptTime := func(claims []slot.Claim, want slot.Outcome) time.Duration {
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
		return commandTime("evalsha")
	}
	// contested is batch's claims marked Contested (routing race).
	contested := func(at time.Time, replica string) []slot.Claim {
		claims := batch(at, replica)
		for i := range claims {
			claims[i].Contested = true
		}
		return claims
	}
	var won, lost, wonContested, lostContested, peeked, finished time.Duration
	at := time.Unix(1_700_000_000, 0)
	for i := 0; b.Loop(); i++ {
		at = at.Add(time.Second)
		// The winner's claims alternate between contested and not: both
		// sorts of win are measured on the same Redis, rounds interleaved.
		if i%2 == 0 {
			won += scriptTime(batch(at, "r1"), slot.OutcomeWon)
		} else {
			wonContested += scriptTime(contested(at, "r1"), slot.OutcomeWon)
		}
		lost += scriptTime(batch(at, "r2"), slot.OutcomeLost)
		lostContested += scriptTime(contested(at, "r4"), slot.OutcomeLost)
		peeked += peekTime(batch(at, "r3"))
		reqs := make([]slot.FinishRequest, len(leases)) // free the job leases for the next slot
		for i, l := range leases {
			reqs[i] = slot.FinishRequest{Lease: l, State: slot.StateDone}
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for _, err := range s.Finish(ctx, reqs) {
			if err != nil {
				b.Fatal(err)
			}
		}
		finished += commandTime("evalsha")
		leases = leases[:0]
	}
	wins, contestedWins := (b.N+1)/2, b.N/2
	b.ReportMetric(float64(won.Microseconds())/float64(wins*njobs), "redis-us/won-claim")
	if contestedWins > 0 {
		b.ReportMetric(float64(wonContested.Microseconds())/float64(contestedWins*njobs), "redis-us/won-contested-claim")
	}
	b.ReportMetric(float64(lost.Microseconds())/float64(b.N*njobs), "redis-us/lost-claim")
	b.ReportMetric(float64(lostContested.Microseconds())/float64(b.N*njobs), "redis-us/lost-contested-claim")
	b.ReportMetric(float64(peeked.Microseconds())/float64(b.N*njobs), "redis-us/peek")
	b.ReportMetric(float64(finished.Microseconds())/float64(b.N*njobs), "redis-us/finish")
}

// BenchmarkClaimWait is one claim of one slot on a master with one replica,
// then its finish: with no WAIT, and with redis.wait_replicas 1 (the claim's
// batch waits until the replica has it). The difference is the cost of the
// option per batch of claims, on loopback.
//
//	go test -run '^$' -bench ClaimWait ./slotstore
func BenchmarkClaimWait(b *testing.B) {
	s := redistest.StartSentinel(b)
	rdb := redis.NewClient(&redis.Options{Addr: s.Master()})
	defer rdb.Close()
	ctx := context.Background()
	var rounds int
	for _, tt := range []struct {
		name string
		opts []slotstore.Option
	}{
		{"wait=0", nil},
		{"wait=1", []slotstore.Option{slotstore.WithWaitReplicas(1, time.Second)}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			rounds++ // -count N runs each again: fresh keys
			store, err := slotstore.New(rdb, fmt.Sprintf("wait-%s-%d", tt.name, rounds), tt.opts...)
			if err != nil {
				b.Fatal(err)
			}
			at := time.Unix(1_700_000_000, 0)
			for b.Loop() {
				at = at.Add(time.Second)
				res, err := store.Claim(ctx, []slot.Claim{{Kind: slot.ClaimLive, Job: "j", Slot: at, Replica: "r1",
					LeaseTTL: time.Minute, Retention: time.Hour, Deadline: time.Now().Add(time.Hour)}})
				if err != nil || res[0].Outcome != slot.OutcomeWon || res[0].Unreplicated {
					b.Fatalf("claim: %+v %v", res, err)
				}
				for _, err := range store.Finish(ctx, []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}}) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkPeek is a hedging replica's read of 100 slots that have records:
// what it allocates, per slot, on the Go side (one MGET).
//
//	go test -run '^$' -bench Peek -benchmem ./slotstore
func BenchmarkPeek(b *testing.B) {
	_, s := benchStore(b)
	ctx := context.Background()
	claims := benchClaims(100, time.Unix(1_700_000_000, 0), "r1")
	if _, err := s.Claim(ctx, claims); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		recs, err := s.Peek(ctx, claims)
		if err != nil || len(recs) != len(claims) || recs[0].Owner != "r1" {
			b.Fatalf("peek: %v, %+v", err, recs[:1])
		}
	}
	b.ReportMetric(float64(testing.AllocsPerRun(10, func() { s.Peek(ctx, claims) }))/float64(len(claims)), "allocs/slot")
}

// benchStore is a prepared store on a Redis of the benchmark's own, whose
// INFO commandstats count only what the benchmark does.
func benchStore(b *testing.B) (*redis.Client, *slotstore.Store) {
	rdb := redistest.StartOwned(b).Client()
	s, err := slotstore.New(rdb, "bench")
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Prepare(context.Background()); err != nil {
		b.Fatal(err)
	}
	return rdb, s
}

// benchClaims is a live claim of the slot at of each of n jobs, job0 to
// job<n-1>, by replica.
func benchClaims(n int, at time.Time, replica string) []slot.Claim {
	claims := make([]slot.Claim, n)
	for i := range claims {
		claims[i] = slot.Claim{Kind: slot.ClaimLive, Job: "job" + strconv.Itoa(i), Slot: at, Replica: replica,
			LeaseTTL: time.Minute, Retention: time.Hour, Deadline: time.Now().Add(time.Hour)}
	}
	return claims
}

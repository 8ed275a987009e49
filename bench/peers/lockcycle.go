package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/slotcron/slotcron/locking"
)

// A locker is one library's lock cycle: Obtain and Release of one free key.
type locker struct {
	name  string
	cycle func(ctx context.Context) error
	sent  *atomic.Int64
	close func()
}

// lockers returns the three libraries' cycles, each on its own client and
// key, with a 10s TTL: bsm/redislock's Obtain (no retry) and Release,
// redsync's NewMutex (one pool, WithTries(1)) LockContext and UnlockContext,
// as gocron-redis-lock does per run, and slotcron's locking Obtain and
// Release.
func lockers(srv *redisServer) []locker {
	const ttl = 10 * time.Second
	var out []locker

	var rlSent atomic.Int64
	rlClient := srv.client(&rlSent)
	rl := redislock.New(rlClient)
	out = append(out, locker{name: "bsm/redislock", sent: &rlSent, close: func() { rlClient.Close() }, cycle: func(ctx context.Context) error {
		lock, err := rl.Obtain(ctx, "cycle:redislock", ttl, nil)
		if err != nil {
			return err
		}
		return lock.Release(ctx)
	}})

	var rsSent atomic.Int64
	rsClient := srv.client(&rsSent)
	rs := redsync.New(goredis.NewPool(rsClient))
	out = append(out, locker{name: "redsync", sent: &rsSent, close: func() { rsClient.Close() }, cycle: func(ctx context.Context) error {
		m := rs.NewMutex("cycle:redsync", redsync.WithTries(1), redsync.WithExpiry(ttl))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("not unlocked")
		}
		return err
	}})

	var scSent atomic.Int64
	scClient := srv.client(&scSent)
	sc := locking.New(scClient)
	out = append(out, locker{name: "slotcron locking", sent: &scSent, close: func() { scClient.Close() }, cycle: func(ctx context.Context) error {
		lease, err := sc.Obtain(ctx, locking.Key("cycle", "slotcron"), ttl)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}})
	return out
}

// cycleResult is one library's lock cycle over every round.
type cycleResult struct {
	name       string
	nsPerCycle []float64 // one per round
	commands   int64     // Redis ran, over every round
	sent       int64     // the client sent, over every round
	cycles     int64
}

// lockCycles runs rounds rounds of n cycles of each library, interleaved
// (A, B, C, A, B, C, ...), after a warm-up of n/10 cycles each that is not
// counted (it loads the scripts and opens the connections).
func lockCycles(ctx context.Context, srv *redisServer, rounds, n int) ([]cycleResult, error) {
	if err := srv.flush(ctx); err != nil {
		return nil, fmt.Errorf("FLUSHALL: %w", err)
	}
	ls := lockers(srv)
	defer func() {
		for _, l := range ls {
			l.close()
		}
	}()
	res := make([]cycleResult, len(ls))
	for i, l := range ls {
		res[i].name = l.name
		for range max(n/10, 1) {
			if err := l.cycle(ctx); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", l.name, err)
			}
		}
	}
	for range rounds {
		for i, l := range ls {
			c0, err := srv.commands(ctx)
			if err != nil {
				return nil, err
			}
			s0 := l.sent.Load()
			start := time.Now()
			for range n {
				if err := l.cycle(ctx); err != nil {
					return nil, fmt.Errorf("%s: %w", l.name, err)
				}
			}
			elapsed := time.Since(start)
			c1, err := srv.commands(ctx)
			if err != nil {
				return nil, err
			}
			res[i].nsPerCycle = append(res[i].nsPerCycle, float64(elapsed.Nanoseconds())/float64(n))
			res[i].commands += c1 - c0 - 1 // - 1: the first INFO
			res[i].sent += l.sent.Load() - s0
			res[i].cycles += int64(n)
		}
	}
	return res, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

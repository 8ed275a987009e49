package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A scenario is one scheduler's replicas, one per clock offset, running the
// same job (1ms of work, every second) on a Redis of their own for ticks
// slots.
type scenario struct {
	name    string          // the scheduler, as the table names it
	offsets []time.Duration // each replica's clock offset from the real clock
	ticks   int
	// lead is how long the replicas run before the first counted slot.
	lead time.Duration
	// start starts the replicas; every run of the job is reported to rec,
	// every command they send is counted in sent. stop returns when they
	// have all stopped.
	start func(ctx context.Context, srv *redisServer, offsets []time.Duration, rec *recorder, sent *atomic.Int64) (stop func(), err error)
}

// result is what a scenario measured over its counted slots.
type result struct {
	runs     []int           // runs of each counted slot, by any replica
	commands int64           // commands Redis ran (INFO commandstats), scripts' included
	sent     int64           // commands the replicas sent
	delays   []time.Duration // each run's start minus its slot's time, on the real clock
	byRep    map[string]int  // runs per replica
}

// recorder collects the job's runs.
type recorder struct {
	mu    sync.Mutex
	slots map[int64][]runAt // by the slot's Unix second
}

type runAt struct {
	replica string
	delay   time.Duration
}

func newRecorder() *recorder { return &recorder{slots: map[int64][]runAt{}} }

// ran records a run of the slot at slot that started at start (real clock).
func (r *recorder) ran(slot time.Time, replica string, start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := slot.Unix()
	r.slots[k] = append(r.slots[k], runAt{replica: replica, delay: start.Sub(slot)})
}

// work is the job: a millisecond of it.
func work() { time.Sleep(time.Millisecond) }

// run runs sc once against srv, which it flushes first.
//
// The commands are counted between two INFOs, one second apart per slot,
// at the phase of the second where no replica is busy: replicas whose
// clocks run from min to max offset act on slot T from T-max to T-min on
// the real clock (plus their work), so the counts are taken halfway
// through the gap, at T + (1s - max - min)/2 for T = the first counted slot
// - 1s and the last. Everything the replicas send in between counts:
// claims, locks, releases, and background traffic such as heartbeats.
func (sc scenario) run(ctx context.Context, srv *redisServer) (result, error) {
	if err := srv.flush(ctx); err != nil {
		return result{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	lo, hi := slices.Min(sc.offsets), slices.Max(sc.offsets)
	if hi-lo >= 900*time.Millisecond {
		return result{}, fmt.Errorf("offsets %v: keep them within 900ms of each other, or slots overlap", sc.offsets)
	}
	phase := (time.Second - hi - lo) / 2

	rec := newRecorder()
	var sent atomic.Int64
	first := time.Now().Add(sc.lead).Truncate(time.Second).Add(time.Second)
	started, err := sc.start(ctx, srv, sc.offsets, rec, &sent)
	if err != nil {
		return result{}, err
	}
	stop := sync.OnceFunc(started)
	defer stop()

	if err := sleepUntil(ctx, first.Add(-time.Second+phase)); err != nil {
		return result{}, err
	}
	c0, err := srv.commands(ctx)
	if err != nil {
		return result{}, err
	}
	s0 := sent.Load()
	if err := sleepUntil(ctx, first.Add(time.Duration(sc.ticks-1)*time.Second+phase)); err != nil {
		return result{}, err
	}
	c1, err := srv.commands(ctx)
	if err != nil {
		return result{}, err
	}
	s1 := sent.Load()
	stop()

	res := result{commands: c1 - c0 - 1, sent: s1 - s0, byRep: map[string]int{}} // - 1: the first INFO
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := range sc.ticks {
		runs := rec.slots[first.Add(time.Duration(i)*time.Second).Unix()]
		res.runs = append(res.runs, len(runs))
		for _, r := range runs {
			res.delays = append(res.delays, r.delay)
			res.byRep[r.replica]++
		}
	}
	slices.Sort(res.delays)
	return res, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// percentile is the nearest-rank percentile p (0 < p <= 100) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

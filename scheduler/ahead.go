package scheduler

import (
	"context"
	"sync"
	"time"
)

// Claims go out a little before their slots' time, so that the round trip
// (and the wait behind a batch of other claims) is over when the slot comes,
// and a won slot's run starts at its time: the run waits for it (Quartz
// acquires its triggers ahead of their fire time in the same way). The
// claim script still decides who runs the slot; a claim sent ahead is
// marked so (slot.Claim.Ahead), and a run of the job in progress then makes
// it wait for the slot's time instead of recording the slot skipped.
//
// How far ahead: twice the longest of the last aheadWindow batches of
// claims this replica sent (not counting hedged ones) that Redis answered
// (a batch that timed out measures the timeout), plus a millisecond,
// within [minAhead, maxAhead]; never more than half of what max_skew leaves
// beside the measured clock offset, so that Redis does not refuse a claim as
// too early. WithClaimAhead fixes it, or turns it off.
//
// Per job, a claim goes out at most a quarter of the job's period ahead
// (jobAhead). A claim sent ahead that finds the job's previous run still
// holding it costs a second claim at the slot's time; so the job's next
// aheadWindow slots are then claimed at their time (runner.onTime): a job
// whose runs take most of its period, or a replica that falls behind, does
// not pay twice a slot.
const (
	minAhead    = 2 * time.Millisecond
	maxAhead    = time.Second
	aheadWindow = 8
)

// aheadMeter keeps the durations of the last claim batches. Owned by the
// loop goroutine.
type aheadMeter struct {
	took [aheadWindow]time.Duration
	n    int
}

func (m *aheadMeter) add(d time.Duration) {
	m.took[m.n%aheadWindow] = d
	m.n++
}

func (m *aheadMeter) longest() time.Duration {
	var d time.Duration
	for _, t := range m.took {
		d = max(d, t)
	}
	return d
}

// ahead is how long before a live slot's time its claim goes out; 0 when
// claims go out at the slot's time.
func (r *runner) ahead() time.Duration {
	want := r.s.cfg.claimAhead
	switch {
	case want < 0:
		return 0
	case want == 0:
		want = min(max(2*r.batches.longest()+time.Millisecond, minAhead), maxAhead)
	}
	offset, _ := r.s.Offset()
	room := (r.s.cfg.maxSkew - max(offset, -offset)) / 2
	return max(min(want, room), 0)
}

// jobAhead is how long before slot n its claim goes out: ahead, but at
// most a quarter of the time since the job's previous slot (prev; when it
// is not known, until the next one, after), so that the previous run has
// had three quarters of the period to end and record its outcome before the
// claim finds the job busy. A zero period (no slot after n, none known
// before it) leaves ahead as it is.
func jobAhead(ahead time.Duration, prev, n, after time.Time) time.Duration {
	period := n.Sub(prev)
	if prev.IsZero() {
		period = after.Sub(n)
		if after.IsZero() {
			return ahead
		}
	}
	return min(ahead, period/4)
}

// waitForSlot waits until the slot's time on the runner's clock, for a run
// whose claim was sent ahead. It returns ctx's cause if ctx ends first (the
// lease was lost, or the shutdown grace ran out): the job then does not run.
// A claim goes out at most maxAhead before its slot, so the run waits at
// most that long: a clock that stepped back since the claim does not hold a
// won slot's run, lease renewed, for the length of the step.
func (r *runner) waitForSlot(ctx context.Context, slotAt time.Time) error {
	wait := min(slotAt.Sub(r.clock.Now()), maxAhead)
	if wait <= 0 {
		return nil
	}
	g := r.gates.join(r.clock, slotAt.UnixNano(), wait)
	if g == nil { // one of the instant's first runs: a timer of its own
		t := r.clock.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C():
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		r.gates.leave(g)
		return context.Cause(ctx)
	}
}

// gates holds the runs that wait for their slots' time. The first
// ownTimers runs of an instant wait on timers of their own; the rest share
// one gate per instant, which one timer opens. A system timer ends in a
// sleep of its own (see preciseTimer), and each wakes its run on the thread
// that slept, so the first runs of an instant start in parallel; with
// thousands of jobs due at one instant, a timer per run cost more than it
// saved. (bench/ab-dispatch.sh, 5 replicas: at 100 jobs a tick, one gate
// for every run delayed the median start by 0.2 ms; at 10,000, a timer per
// run delayed it by about 20 ms.) Safe for concurrent use.
type gates struct {
	mu    sync.Mutex
	at    map[int64]*gate // by the instant, Unix ns
	first map[int64]int   // runs of an instant given timers of their own
}

// ownTimers is how many runs of an instant wait on timers of their own.
const ownTimers = 32

type gate struct {
	key     int64
	open    chan struct{} // closed at the instant
	stop    chan struct{} // closed when every run has left before it
	waiting int           // runs waiting, under gates.mu
}

// join returns the gate of the instant key, or nil for one of the
// instant's first ownTimers runs. The first run to join a gate arms it to
// open after wait: a run that joins later waits no longer than that, so no
// run waits more than maxAhead.
func (gs *gates) join(clock Clock, key int64, wait time.Duration) *gate {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g, ok := gs.at[key]; ok {
		g.waiting++
		return g
	}
	if gs.first == nil {
		gs.at, gs.first = map[int64]*gate{}, map[int64]int{}
	}
	if n := gs.first[key]; n < ownTimers {
		if n == 0 && len(gs.first) >= 64 { // forget the instants that have passed
			now := clock.Now().UnixNano()
			for k := range gs.first {
				if k < now {
					delete(gs.first, k)
				}
			}
		}
		gs.first[key] = n + 1
		return nil
	}
	g := &gate{key: key, open: make(chan struct{}), stop: make(chan struct{}), waiting: 1}
	gs.at[key] = g
	t := clock.NewTimer(wait)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
		case <-g.stop:
			return
		}
		gs.mu.Lock()
		if gs.at[key] == g {
			delete(gs.at, key)
		}
		gs.mu.Unlock()
		close(g.open)
	}()
	return g
}

// leave takes a run that stops waiting before its instant off g; the last
// one to leave stops g's timer.
func (gs *gates) leave(g *gate) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.waiting--; g.waiting > 0 || gs.at[g.key] != g {
		return
	}
	delete(gs.at, g.key)
	close(g.stop)
}

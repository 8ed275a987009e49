package scheduler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// stop is what a replica does once its loop has returned, before it waits
// for its runs: it leaves the registry, then records the slots that would
// keep no record otherwise (flushMisses), but for the catch-up slots that
// a live peer holds in its own catch-up, which that peer runs.
//
// It leaves first, and only then reads who is live, so that of two
// replicas that stop at once, each able to count on the other, at least
// the one that leaves last finds the other gone, and records what is left.
// A replica that cannot leave, or read the registry, counts on no peer: a
// peer stopping meanwhile might count on it.
func (r *runner) stop(ctx context.Context) {
	// No new claims from here: peers may stop preferring this replica.
	lctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	err := r.s.claimer.Leave(lctx, r.s.me())
	cancel()
	if err != nil {
		r.log.Warn("cannot leave the registry; peers will count this replica live until its heartbeat is stale", "error", err)
	}
	var peers []slot.Replica
	if err == nil && len(r.catchup) > 0 {
		rctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
		reg, err := r.s.claimer.Registry(rctx, r.s.staleAfter())
		cancel()
		if err != nil {
			r.log.Warn("cannot read which peers are live: recording missed every catch-up slot not reached", "error", err)
		} else {
			peers = catchupPeers(reg, r.self, r.s.table.Table, r.s.cfg.heartbeatEvery*3/2)
		}
	}
	r.flushMisses(ctx, peers)
	// The gone replicas' entries not settled yet: tried once more, then
	// said at ERROR (the heartbeat loop, which settles them, has returned).
	sctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	r.settleGone(sctx)
	cancel()
	r.pendingGone()
}

// catchupPeers returns the live peers of reg that run table ("": any) and
// publish a catch-up, and whose last heartbeat is at most fresh old: a peer last
// seen longer ago than a heartbeat period (and a half, for the round trip)
// may have died, and a dead peer runs nothing. A peer that started later than
// this replica planned its catch-up from a later state, and holds only
// later slots, if any: its ranges say which.
func catchupPeers(reg slot.Registry, self, table string, fresh time.Duration) []slot.Replica {
	var out []slot.Replica
	for _, p := range reg.Replicas {
		if p.ID != self && (table == "" || p.Table == table) && len(p.Catchup) > 0 && reg.Now.Sub(p.Seen) <= fresh {
			out = append(out, p)
		}
	}
	return out
}

// carrier returns the ID of a peer whose catch-up holds job's slot at, or
// "". Replicas of one table plan a job's catch-up as the same run of
// slots, so a peer whose range holds at claims it in turn, or records it
// missed as it stops.
func carrier(peers []slot.Replica, job string, at time.Time) string {
	for _, p := range peers {
		if r, ok := p.Catchup[job]; ok && r.Holds(at) {
			return p.ID
		}
	}
	return ""
}

// catchupView is what this replica's heartbeat publishes of its catch-up
// (slot.Replica.Catchup): per job, the first and last slot of its
// startup's outage while any of its slots waits (runner.outage), then the
// first and last it has yet to run. The loop writes it as its catch-up
// goes; heartbeats read it.
type catchupView struct {
	mu   sync.Mutex
	jobs map[string]slot.CatchupRange
	runs map[string]bool // the jobs whose range holds catch-up slots to run
}

// set publishes rest, the job's catch-up slots yet to run, oldest first.
func (v *catchupView) set(job string, rest []time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(rest) == 0 {
		delete(v.jobs, job)
		delete(v.runs, job)
		return
	}
	v.put(job, slot.CatchupRange{From: rest[0], To: rest[len(rest)-1]}, true)
}

// publish publishes rg as the job's range: its startup's outage, while any
// of it waits (runner.outage); runs says whether it holds slots to run.
func (v *catchupView) publish(job string, rg slot.CatchupRange, runs bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.put(job, rg, runs)
}

func (v *catchupView) put(job string, rg slot.CatchupRange, runs bool) {
	if v.jobs == nil {
		v.jobs, v.runs = map[string]slot.CatchupRange{}, map[string]bool{}
	}
	v.jobs[job] = rg
	if runs {
		v.runs[job] = true
	} else {
		delete(v.runs, job)
	}
}

// all returns every job's range, however many: what this replica holds.
func (v *catchupView) all() map[string]slot.CatchupRange {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.jobs)
}

// snapshot returns what a heartbeat publishes: at most maxListedJobs jobs'
// ranges (a peer counts on none of the others: it records their slots as
// it stops), nil when none. Past that many, the same ones each time: first
// those that hold slots to run (a peer that stops would record them
// missed, and this replica would not run them), then the others, by name.
func (v *catchupView) snapshot() map[string]slot.CatchupRange {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.jobs) == 0 {
		return nil
	}
	if len(v.jobs) <= maxListedJobs {
		return maps.Clone(v.jobs)
	}
	names := slices.SortedFunc(maps.Keys(v.jobs), func(a, b string) int {
		if v.runs[a] != v.runs[b] {
			if v.runs[a] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]slot.CatchupRange, maxListedJobs)
	for _, job := range names[:maxListedJobs] {
		out[job] = v.jobs[job]
	}
	return out
}

// stopReason is recorded with a catch-up slot that this replica had not
// reached when it stopped.
func stopReason(replica string) string {
	return "no replica was running at the slot; " + replica + " stopped before its catch-up reached it"
}

// joinKeys returns m's keys, sorted, joined by commas.
func joinKeys(m map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}

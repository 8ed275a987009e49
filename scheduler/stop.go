package scheduler

import (
	"context"
	"log/slog"
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
}

// catchupPeers returns the live peers of reg that run table and publish a
// catch-up, and whose last heartbeat is at most fresh old: a peer last
// seen longer ago than a heartbeat period (and a half, for the round trip)
// may have died, and a dead peer runs nothing. A peer that started later than
// this replica planned its catch-up from a later state, and holds only
// later slots, if any: its ranges say which.
func catchupPeers(reg slot.Registry, self, table string, fresh time.Duration) []slot.Replica {
	var out []slot.Replica
	for _, p := range reg.Replicas {
		if p.ID != self && p.Table == table && len(p.Catchup) > 0 && reg.Now.Sub(p.Seen) <= fresh {
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
// (slot.Replica.Catchup): per job, the first and last slot it has yet to
// run. The loop writes it as its catch-up goes; heartbeats read it.
type catchupView struct {
	mu   sync.Mutex
	jobs map[string]slot.CatchupRange
}

// set publishes rest, the job's catch-up slots yet to run, oldest first.
func (v *catchupView) set(job string, rest []time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(rest) == 0 {
		delete(v.jobs, job)
		return
	}
	if v.jobs == nil {
		v.jobs = map[string]slot.CatchupRange{}
	}
	v.jobs[job] = slot.CatchupRange{From: rest[0], To: rest[len(rest)-1]}
}

// snapshot returns what a heartbeat publishes: at most maxListedJobs jobs'
// ranges (a peer counts on none of the others: it records their slots as
// it stops), nil when none.
func (v *catchupView) snapshot() map[string]slot.CatchupRange {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.jobs) == 0 {
		return nil
	}
	if len(v.jobs) <= maxListedJobs {
		return maps.Clone(v.jobs)
	}
	out := make(map[string]slot.CatchupRange, maxListedJobs)
	for job, r := range v.jobs {
		if len(out) == maxListedJobs {
			break
		}
		out[job] = r
	}
	return out
}

// stopReason is recorded with a catch-up slot that this replica had not
// reached when it stopped.
func stopReason(replica string) string {
	return "no replica was running at the slot; " + replica + " stopped before its catch-up reached it"
}

// flushMisses records, as the replica stops, the slots that would keep no
// record otherwise: those its catch-up policy left missed and that have no
// record yet (still in the backlog, or waiting for their misfire grace to
// pass on Redis's clock: plan.go's claim), and the catch-up slots it had
// not run yet (catchup all and last), the one whose claim is in flight
// included, unless its run is here or one of peers holds it in its own
// catch-up (carrier). Nobody else would record them: the job's state
// already holds later slots, from which the next start plans.
// They go without their deadline: a replica whose clock lags may yet claim
// one of the latest within its misfire grace, but a slot recorded missed a
// little early is better than one left with no record. Each answer counts
// in the claims metric. It takes at most the claim timeout; what it cannot
// record is logged at ERROR.
func (r *runner) flushMisses(ctx context.Context, peers []slot.Replica) {
	var claims []slot.Claim
	for _, q := range r.queue {
		if q.p.claim.Kind == slot.ClaimMiss {
			c := q.p.claim
			c.Deadline = time.Time{}
			claims = append(claims, c)
		}
	}
	for j, b := range r.backlog {
		for len(b.slots) > 0 {
			c := r.missClaim(j, b)
			c.Deadline = time.Time{}
			claims = append(claims, c)
		}
	}
	policy := len(claims)
	left, carriers := 0, map[string]bool{}
	for j, rest := range r.catchup {
		for _, at := range rest {
			if r.runs.has(target{at: at}.key(j.Name)) { // its run records it
				continue
			}
			if id := carrier(peers, j.Name, at); id != "" {
				left++
				carriers[id] = true
				continue
			}
			c := r.claim(slot.ClaimMiss, j, at)
			c.Deadline, c.Reason = time.Time{}, stopReason(r.self)
			claims = append(claims, c)
		}
	}
	if left > 0 {
		r.log.Info("stopping: leaving catch-up slots not reached to live peers that hold them in their own catch-up",
			"slots", left, "peers", strings.Join(slices.Sorted(maps.Keys(carriers)), ","))
	}
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	defer cancel()
	recorded, failed := 0, 0
	var lastErr error
	for i := 0; i < len(claims); i += maxBatch {
		chunk := claims[i:min(i+maxBatch, len(claims))]
		res, err := r.s.claimer.Claim(ctx, chunk)
		for k, c := range chunk {
			outcome := outcomeError
			switch {
			case err != nil:
				failed, lastErr = failed+1, err
			case res[k].Err != nil:
				failed, lastErr = failed+1, res[k].Err
			default:
				recorded++ // missed, or it had a record meanwhile
				outcome = string(res[k].Outcome)
			}
			r.s.tel.claimed(r.s.tel.metricsOf(c.Job), outcome)
		}
	}
	attrs := []any{"slots", len(claims), "left_by_the_policy", policy, "catchup_not_reached", len(claims) - policy}
	if failed > 0 {
		r.log.Error("stopping with slots that the catch-up policy left missed, or that the catch-up had not reached, and that are not recorded: they keep no record",
			append(attrs, "not_recorded", failed, "error", lastErr)...)
		return
	}
	level := slog.LevelInfo
	if len(claims) > policy {
		level = slog.LevelWarn // slots the policy meant to run
	}
	r.log.Log(ctx, level, "stopping: recorded missed the slots that the catch-up policy left missed, or that the catch-up had not reached, without waiting for their misfire grace", attrs...)
}

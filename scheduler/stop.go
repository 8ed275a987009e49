package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotcron/slotcron/slot"
)

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
// included, unless its run is here. Nobody else would record them: the
// job's state already holds later slots, from which the next start plans.
// They go without their deadline: a replica whose clock lags may yet claim
// one of the latest within its misfire grace, but a slot recorded missed a
// little early is better than one left with no record. Each answer counts
// in the claims metric. It takes at most the claim timeout; what it cannot
// record is logged at ERROR.
func (r *runner) flushMisses(ctx context.Context) {
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
	for j, rest := range r.catchup {
		for _, at := range rest {
			if r.runs.has(target{at: at}.key(j.Name)) { // its run records it
				continue
			}
			c := r.claim(slot.ClaimMiss, j, at)
			c.Deadline, c.Reason = time.Time{}, stopReason(r.self)
			claims = append(claims, c)
		}
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

package scheduler

import (
	"slices"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// MaxCatchupSlots is the most slots a job's catch-up window may hold: a
// starting replica records every one that no replica ran, and New refuses a
// window that could hold more (each record is a key in Redis for the
// retention). @every 1s with a 48h window holds 172,800.
const MaxCatchupSlots = 200_000

// startupPlan is what a starting replica does with a job's slots before its
// start: the slots that every replica missed while all were down.
type startupPlan struct {
	run   []time.Time // catch-up claims, oldest first; run one at a time
	miss  []time.Time // recorded missed
	check []time.Time // slots recorded running, and the latest recorded one: settle each if its owner died
	live  time.Time   // the first slot claimed live
}

// planStartup plans a job at start, from what the store knows of it. start
// is the runner's clock: Redis's while the replica's own is off by more
// than maxSkew (runnerClock). The slots in (start - maxSkew, start] are
// claimed live, because a replica whose
// clock lags by up to maxSkew may be claiming them right now; older slots in
// the catch-up window, after the latest recorded one, follow the catch-up
// policy (a first deployment, with no record, catches nothing up). Every slot
// still recorded running is checked, and settled by the job's policy if its
// owner is gone, however old; so is the latest recorded slot.
func planStartup(j Job, sched Schedule, st slot.JobState, start time.Time, maxSkew time.Duration) startupPlan {
	liveFrom := start.Add(-maxSkew)
	p := startupPlan{live: sched.Next(liveFrom), check: st.Running}
	last := st.Last
	if last.IsZero() {
		return p
	}
	from := start.Add(-j.CatchupWindow)
	if last.After(from) {
		from = last
		if !slices.ContainsFunc(p.check, last.Equal) {
			p.check = append(slices.Clone(p.check), last)
		}
	}
	var past []time.Time
	for s := sched.Next(from); !s.After(liveFrom) && !s.IsZero(); s = sched.Next(s) {
		past = append(past, s) // at most MaxCatchupSlots: New checked the window
	}
	switch {
	case len(past) == 0:
	case j.Catchup == CatchupAll:
		p.run = past
	case j.Catchup == CatchupLast:
		p.run = past[len(past)-1:]
		p.miss = past[:len(past)-1]
	default:
		p.miss = past
	}
	return p
}

// missReason is recorded with a slot that the catch-up policy does not run.
func missReason(c Catchup) string {
	if c == CatchupLast {
		return "no replica was running at the slot; catchup: last ran a later slot"
	}
	return "no replica was running at the slot; catchup: none"
}

// claim returns the request for one slot of j.
func claim(kind slot.Kind, j Job, at time.Time, replica string) slot.Claim {
	c := slot.Claim{
		Kind:         kind,
		Job:          j.Name,
		Slot:         at,
		Replica:      replica,
		LeaseTTL:     j.LeaseTTL,
		Retention:    j.Retention,
		AllowOverlap: j.Overlap == OverlapAllow,
		Retry:        j.OnOwnerLost == OwnerLostRetry,
		MaxAttempts:  j.MaxAttempts,
	}
	switch kind {
	case slot.ClaimLive:
		// A slot may start until slot + misfire grace, judged on Redis's clock.
		c.Deadline = at.Add(j.MisfireGrace)
		c.Reason = "misfire"
	case slot.ClaimMiss:
		// Recorded missed once Redis's clock is past the slot's misfire
		// grace, and not before: a starting replica's clock may be up to
		// max_skew ahead of Redis's, and a running one's up to max_skew
		// behind, so a slot this replica takes for missed may still be
		// claimed live by another within its grace.
		c.Deadline = at.Add(j.MisfireGrace)
		c.Reason = missReason(j.Catchup)
	}
	return c
}

package scheduler

import (
	"time"

	"github.com/slotcron/slotcron/locking"
)

// maxPlanSlots bounds the slots one startup plan walks through.
const maxPlanSlots = 100_000

// startupPlan is what a starting replica does with a job's slots before its
// start: the slots that every replica missed while all were down.
type startupPlan struct {
	run   []time.Time // catch-up claims, oldest first; run one at a time
	miss  []time.Time // recorded missed
	check time.Time   // the latest recorded slot: settle it if its owner died
	live  time.Time   // the first slot claimed live
}

// planStartup plans a job at start. last is the job's latest recorded slot
// (zero when the job has none: a first deployment catches nothing up). The
// slots in (start - maxSkew, start] are claimed live, because a replica whose
// clock lags by up to maxSkew may be claiming them right now; older slots in
// the catch-up window, after last, follow the catch-up policy.
func planStartup(j Job, sched Schedule, last, start time.Time, maxSkew time.Duration) startupPlan {
	liveFrom := start.Add(-maxSkew)
	p := startupPlan{live: sched.Next(liveFrom)}
	if last.IsZero() {
		return p
	}
	from := start.Add(-j.CatchupWindow)
	if last.After(from) {
		from = last
		p.check = last
	}
	var past []time.Time
	for s := sched.Next(from); !s.After(liveFrom) && len(past) < maxPlanSlots; s = sched.Next(s) {
		past = append(past, s)
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
func claim(kind locking.ClaimKind, j Job, slot time.Time, replica string) locking.SlotClaim {
	c := locking.SlotClaim{
		Kind:         kind,
		Job:          j.Name,
		Slot:         slot,
		Replica:      replica,
		LeaseTTL:     j.LeaseTTL,
		Retention:    j.Retention,
		AllowOverlap: j.Overlap == OverlapAllow,
		Retry:        j.OnOwnerLost == OwnerLostRetry,
		MaxAttempts:  j.MaxAttempts,
	}
	switch kind {
	case locking.ClaimLive:
		// A slot may start until slot + misfire grace, judged on Redis's clock.
		c.Deadline = slot.Add(j.MisfireGrace)
		c.Reason = "misfire"
	case locking.ClaimMiss:
		c.Reason = missReason(j.Catchup)
	}
	return c
}

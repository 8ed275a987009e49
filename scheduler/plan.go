package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// MaxCatchupSlots is the most slots a job's catch-up window may hold: a
// starting replica records every one that no replica ran, and New refuses a
// window that could hold more (each record is a key in Redis for the
// retention). @every 1s with a 48h window holds 172,800.
const MaxCatchupSlots = 200_000

// MaxOlderSlots bounds the slots older than their job's catch-up window
// that a start records missed, all jobs together: each record is a key in
// Redis for the retention, and every job of a large table may have been
// idle as long (10,000 jobs due every minute, down for a day, would be 14
// million). A table of n jobs records at most MaxOlderSlots/n of each
// job's (and MaxCatchupSlots in all, with its window's), the latest; the
// rest are counted in a WARN.
const MaxOlderSlots = 1_000_000

// olderLimit is how many slots older than its catch-up window a start
// records for each job of a table of n.
func olderLimit(n int) int { return MaxOlderSlots / max(n, 1) }

// startupPlan is what a starting replica does with a job's slots before its
// start: the slots that every replica missed while all were down.
type startupPlan struct {
	run   []time.Time // catch-up claims, oldest first; run one at a time
	miss  []time.Time // recorded missed, oldest first: the first old of them are older than the catch-up window
	old   int
	check []time.Time // slots recorded running, and the latest recorded one: settle each if its owner died
	live  time.Time   // the first slot claimed live

	// Slots older than the window that get no record: over limit (the
	// oldest), and those older than the retention plus max_skew, whose
	// record would have expired by now; expiredMore: more than expired
	// (not counted further).
	limit            int
	dropped, expired int
	expiredMore      bool
	expiredTo        time.Time // the latest slot that would have expired
}

// planStartup plans a job at start, from what the store knows of it. start
// is the runner's clock: Redis's while the replica's own is off by more
// than maxSkew (runnerClock). The slots in (start - maxSkew, start] are
// claimed live, because a replica whose
// clock lags by up to maxSkew may be claiming them right now; older slots in
// the catch-up window, after the latest recorded one, follow the catch-up
// policy (a first deployment, with no record, catches nothing up). The
// slots older than the window, after the latest recorded one, are recorded
// missed, back to the retention plus maxSkew before start: an older slot's
// record would have expired by now had it run, so a record would say no
// more than its absence (and these could be millions). At most
// MaxCatchupSlots slots of a job are run or recorded, the window's first,
// and at most older of those older than the window: the oldest of the
// others are dropped (counted). Every slot still recorded running is
// checked, and settled by the job's policy if its owner is gone, however
// old; so is the latest recorded slot.
func planStartup(j Job, sched Schedule, st slot.JobState, start time.Time, maxSkew time.Duration, older int) startupPlan {
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
	var old []time.Time
	if last.Before(from) {
		p.limit = min(MaxCatchupSlots-len(past), older)
		old = p.older(sched, last, from, start.Add(-j.Retention-maxSkew), p.limit)
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
	if len(old) > 0 {
		p.miss, p.old = append(old, p.miss...), len(old)
	}
	return p
}

// outage is the range of every slot p runs or records missed: the misses,
// oldest first, come before the slots to run, but the last one missed by
// catchup last; false when there are none.
func (p startupPlan) outage() (slot.CatchupRange, bool) {
	all := slices.Concat(p.miss, p.run)
	if len(all) == 0 {
		return slot.CatchupRange{}, false
	}
	return slot.CatchupRange{From: slices.MinFunc(all, time.Time.Compare), To: slices.MaxFunc(all, time.Time.Compare)}, true
}

// older returns the slots of sched in (last, windowFrom], oldest first,
// that are after expiry: at most limit, the latest. It counts in p those
// it drops over the limit, and those up to expiry. It keeps no more than
// limit times at once, however many slots there are.
func (p *startupPlan) older(sched Schedule, last, windowFrom, expiry time.Time, limit int) []time.Time {
	from := last
	if expiry.After(last) {
		p.expired, p.expiredMore = countSlots(sched, last, expiry, maxCounted)
		if p.expired > 0 {
			p.expiredTo = expiry
		}
		from = expiry
	}
	if e, ok := sched.(everySchedule); ok {
		// Its slots are the period's multiples: those the limit drops are
		// skipped by arithmetic rather than stepped through (with a table
		// of thousands of jobs due every second, and the retention's day of
		// slots each, the steps held up the start).
		if n, _ := countSlots(e, from, windowFrom, math.MaxInt); n > limit {
			per := int64(e.period / time.Second)
			p.dropped = n - max(limit, 0)
			from = time.Unix((floorDiv(from.Unix(), per)+int64(p.dropped))*per, 0).In(from.Location())
		}
	}
	keep := newest{n: max(limit, 0)}
	for s := sched.Next(from); !s.After(windowFrom) && !s.IsZero(); s = sched.Next(s) {
		keep.add(s)
	}
	p.dropped += keep.dropped
	return keep.times()
}

// maxCounted bounds how many slots past the retention planStartup counts
// for its log line, for a schedule it must step through one slot at a time
// (about 60 ns a slot: a cron every second, idle 200 days, took 0.57 s a
// job at 10 million): a job silent for years would otherwise hold up the
// start, and every live slot with it.
const maxCounted = 1_000_000

// countSlots counts the slots of sched in (after, until], up to limit; more
// reports that there are more.
func countSlots(sched Schedule, after, until time.Time, limit int) (n int, more bool) {
	if e, ok := sched.(everySchedule); ok {
		p := int64(e.period / time.Second)
		c := floorDiv(until.Unix(), p) - floorDiv(after.Unix(), p)
		return int(min(max(c, 0), int64(limit))), c > int64(limit)
	}
	for s := sched.Next(after); !s.IsZero() && !s.After(until); s = sched.Next(s) {
		if n == limit {
			return n, true
		}
		n++
	}
	return n, false
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// newest keeps the latest n times it is given, in a ring, and counts the
// others.
type newest struct {
	buf     []time.Time
	n, at   int // at: the oldest kept, once the ring is full
	dropped int
}

func (k *newest) add(t time.Time) {
	switch {
	case k.n == 0:
		k.dropped++
	case len(k.buf) < k.n:
		k.buf = append(k.buf, t)
	default:
		k.buf[k.at] = t
		k.at = (k.at + 1) % k.n
		k.dropped++
	}
}

// times returns the kept times, oldest first.
func (k *newest) times() []time.Time {
	slices.Reverse(k.buf[:k.at])
	slices.Reverse(k.buf[k.at:])
	slices.Reverse(k.buf)
	k.at = 0
	return k.buf
}

// missReason is recorded with a slot that the catch-up policy does not run.
func missReason(c Catchup) string {
	if c == CatchupLast {
		return "no replica was running at the slot; catchup: last ran a later slot"
	}
	return "no replica was running at the slot; catchup: none"
}

// oldReason is recorded with a slot older than the catch-up window.
func oldReason(window time.Duration) string {
	return fmt.Sprintf("no replica was running at the slot, older than the catch-up window (%v) when one started", window)
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

// backlog is a job's slots to record missed at start, oldest first, sent
// maxBatch at a time: the first old of them were older than the catch-up
// window, and their records say so. Every replica that starts after the
// same outage plans the same slots; so that Redis gets a claim per slot
// rather than one per replica, a replica sends first the slots it is the
// preferred replica of (rendezvous over the live candidates, as spread
// routing picks), and postpones the others by its place in their order:
// those it comes next for, it reads the records of (and claims if they
// have none) a backstop's delay later; those it comes third for, a delay
// after that; and so on (drainBacklog).
type backlog struct {
	slots []time.Time
	old   int
	// later[k] holds the slots this replica comes k+2nd for, oldest first.
	later  []oldSlots
	nlater int // how many slots later holds
}

// oldSlots are slots oldest first, of which the first old are older than
// the catch-up window.
type oldSlots struct {
	slots []time.Time
	old   int
}

// postpone moves b's first slot to later[k].
func (b *backlog) postpone(k int) {
	for len(b.later) <= k {
		b.later = append(b.later, oldSlots{})
	}
	l := &b.later[k]
	l.slots = append(l.slots, b.slots[0])
	if b.old > 0 {
		b.old--
		l.old++
	}
	b.slots = b.slots[1:]
	b.nlater++
}

// nextLater is the index of the first of b.later that holds a slot; -1
// when none does.
func (b *backlog) nextLater() int {
	for k := range b.later {
		if len(b.later[k].slots) > 0 {
			return k
		}
	}
	return -1
}

// empty reports whether b has no slot left to send.
func (b *backlog) empty() bool { return len(b.slots) == 0 && b.nlater == 0 }

// missClaim takes the first slot of b (once those are sent, the first of
// its first later ones that hold any), and returns the claim that records
// it missed, with its reason.
func (r *runner) missClaim(j *jobState, b *backlog) slot.Claim {
	l := oldSlots{b.slots, b.old}
	k := -1
	if len(b.slots) == 0 {
		k = b.nextLater()
		l = b.later[k]
	}
	c := r.claim(slot.ClaimMiss, j, l.slots[0])
	if l.old > 0 {
		c.Reason = oldReason(j.CatchupWindow)
		l.old--
	}
	l.slots = l.slots[1:]
	if k < 0 {
		b.slots, b.old = l.slots, l.old
	} else {
		b.later[k] = l
		b.nlater--
	}
	return c
}

// logUnrecorded says at WARN how many of a job's slots its plan leaves
// with no record: those over MaxCatchupSlots, and those whose record would
// have expired.
func (r *runner) logUnrecorded(j *jobState, p startupPlan) {
	if p.dropped == 0 && p.expired == 0 {
		return
	}
	expired := strconv.Itoa(p.expired)
	if p.expiredMore {
		expired = "more than " + expired
	}
	attrs := []any{"slotcron.job", j.Name, "over_limit", p.dropped, "past_retention", expired}
	if p.expired > 0 {
		attrs = append(attrs, "past_retention_to", p.expiredTo.UTC().Format(time.RFC3339))
	}
	r.log.Warn(fmt.Sprintf("catching up: slots older than the catch-up window left with no record: %s older than the retention "+
		"(%v) plus max_skew, whose record would have expired by now had they run, and %d over the %d older slots this start records of the job "+
		"(scheduler.MaxCatchupSlots a job, with its window's, and scheduler.MaxOlderSlots across the table)",
		expired, j.Retention, p.dropped, p.limit), attrs...)
}

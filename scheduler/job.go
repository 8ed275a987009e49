package scheduler

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
)

// Overlap says whether a slot may start while a run of the same job is in progress.
type Overlap string

// The overlap policies.
const (
	OverlapSkip  Overlap = "skip"  // record the slot skipped (the default)
	OverlapAllow Overlap = "allow" // start it anyway
)

// Catchup says what a replica does, when it starts, with the slots that
// every replica missed while they were all down.
type Catchup string

// The catch-up policies.
const (
	CatchupNone Catchup = "none" // record them missed
	CatchupLast Catchup = "last" // run the latest, record the others missed (the default)
	CatchupAll  Catchup = "all"  // run each of them, oldest first, one at a time
)

// Routing says which replica claims a slot first.
type Routing string

// The routing policies. Neither changes what the claim decides (the slot
// starts once either way): only which replica asks first, and so how much
// work Redis does and which replica runs the job.
const (
	// RoutingSpread: the slot's preferred replica, chosen by rendezvous
	// hashing of (job, slot) over the live replicas that run the job, claims
	// at the slot's time; the next two in that order (its hedgers) read
	// its record a hedge later and claim it only if it has none, and win
	// only when the preferred one did not (it is dead, frozen, partitioned
	// or refusing); the rest look for its record half a second later (a
	// backstop) and claim it only if it still has none. Slots spread evenly
	// over the replicas. The default.
	RoutingSpread Routing = "spread"
	// RoutingRace: every replica claims at the slot's time; the fastest wins.
	RoutingRace Routing = "race"
)

// OwnerLost says what happens to a slot whose owner lost its lease mid-run
// (it crashed, froze, or lost Redis).
type OwnerLost string

// The owner-loss policies.
const (
	OwnerLostAbandon OwnerLost = "abandon" // record it abandoned: at most once (the default)
	OwnerLostRetry   OwnerLost = "retry"   // another replica runs attempt+1: at least once
)

// Job is an entry of the cron table. Zero fields take their defaults.
type Job struct {
	Name          string        // the name the job's Func is registered under
	Schedule      string        // see ParseSchedule
	Timeout       time.Duration // the run's context ends after it; 0: no timeout
	Overlap       Overlap       // default OverlapSkip
	MisfireGrace  time.Duration // how late a slot may still start; default 1m
	Catchup       Catchup       // default CatchupLast
	CatchupWindow time.Duration // how far back catch-up looks; default 1h
	OnOwnerLost   OwnerLost     // default OwnerLostAbandon
	MaxAttempts   int           // attempts per slot under OwnerLostRetry; default 3
	Retention     time.Duration // how long slot records are kept; default 24h
	LeaseTTL      time.Duration // default: the scheduler's WithLeaseTTL
	Routing       Routing       // default RoutingSpread
}

// The defaults of a Job's fields.
const (
	DefaultMisfireGrace  = time.Minute
	DefaultCatchupWindow = time.Hour
	DefaultMaxAttempts   = 3
	DefaultRetention     = 24 * time.Hour
)

// FieldError is one problem with one field of a Job, named as in the YAML
// config (schedule, misfire_grace, ...).
type FieldError struct {
	Field string
	Err   error
}

func (e FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e FieldError) Unwrap() error { return e.Err }

// WithDefaults returns j with its zero fields set to their defaults;
// leaseTTL is the scheduler-wide lease TTL.
func (j Job) WithDefaults(leaseTTL time.Duration) Job {
	if j.Overlap == "" {
		j.Overlap = OverlapSkip
	}
	if j.MisfireGrace == 0 {
		j.MisfireGrace = DefaultMisfireGrace
	}
	if j.Catchup == "" {
		j.Catchup = CatchupLast
	}
	if j.CatchupWindow == 0 {
		j.CatchupWindow = DefaultCatchupWindow
	}
	if j.OnOwnerLost == "" {
		j.OnOwnerLost = OwnerLostAbandon
	}
	if j.MaxAttempts == 0 && j.OnOwnerLost == OwnerLostRetry {
		j.MaxAttempts = DefaultMaxAttempts
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = 1
	}
	if j.Retention == 0 {
		j.Retention = DefaultRetention
	}
	if j.LeaseTTL == 0 {
		j.LeaseTTL = leaseTTL
	}
	if j.Routing == "" {
		j.Routing = RoutingSpread
	}
	return j
}

// MinLeaseTTL is the shortest lease a job may have: renewals every TTL/3 must
// fit in it. The worker's config checks lease.ttl against it.
const MinLeaseTTL = slot.MinLeaseTTL

// DefaultRenewEvery is how often leases of ttl are renewed when nothing says
// otherwise: a third of the TTL, as Redisson and etcd do.
func DefaultRenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// CheckRenewEvery returns an error unless renew, the period of a replica's
// renewals, is positive and at most half of ttl: a lease must survive one
// renewal that gets no answer. The worker's config uses it too.
func CheckRenewEvery(renew, ttl time.Duration) error {
	if renew <= 0 || renew > ttl/2 {
		return fmt.Errorf("must be > 0 and at most half of the lease TTL (%v), got %v", ttl, renew)
	}
	return nil
}

// Validate returns every problem of j, with its defaults applied, one
// FieldError each. maxSkew is the scheduler's; the retention must cover the
// misfire grace and the catch-up window plus maxSkew, or a late replica could
// find a finished slot's record gone and run it again.
func (j Job) Validate(maxSkew time.Duration) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{field, fmt.Errorf(format, args...)})
	}
	if err := jobs.ValidateName(j.Name); err != nil {
		errs = append(errs, FieldError{"name", err})
	}
	if _, err := ParseSchedule(j.Schedule); err != nil {
		errs = append(errs, FieldError{"schedule", err})
	}
	if j.Timeout < 0 {
		add("timeout", "must be >= 0, got %v", j.Timeout)
	}
	if j.Overlap != OverlapSkip && j.Overlap != OverlapAllow {
		add("overlap", "must be %q or %q, got %q", OverlapSkip, OverlapAllow, j.Overlap)
	}
	if j.Routing != RoutingSpread && j.Routing != RoutingRace {
		add("routing", "must be %q or %q, got %q", RoutingSpread, RoutingRace, j.Routing)
	}
	if j.MisfireGrace <= 0 {
		add("misfire_grace", "must be > 0, got %v", j.MisfireGrace)
	}
	if j.Catchup != CatchupNone && j.Catchup != CatchupLast && j.Catchup != CatchupAll {
		add("catchup", "must be %q, %q or %q, got %q", CatchupNone, CatchupLast, CatchupAll, j.Catchup)
	}
	if j.CatchupWindow <= 0 {
		add("catchup_window", "must be > 0, got %v", j.CatchupWindow)
	}
	switch j.OnOwnerLost {
	case OwnerLostRetry:
		if j.MaxAttempts < 1 {
			add("max_attempts", "must be >= 1, got %d", j.MaxAttempts)
		}
	case OwnerLostAbandon:
		if j.MaxAttempts != 1 {
			add("max_attempts", "applies only with on_owner_lost: retry (a slot is attempted once under abandon)")
		}
	default:
		add("on_owner_lost", "must be %q or %q, got %q", OwnerLostAbandon, OwnerLostRetry, j.OnOwnerLost)
	}
	if j.LeaseTTL < MinLeaseTTL {
		add("lease_ttl", "must be at least %v, got %v", MinLeaseTTL, j.LeaseTTL)
	}
	switch {
	case j.Retention <= 0:
		add("retention", "must be > 0, got %v", j.Retention)
	case j.Retention < addSaturating(j.MisfireGrace, maxSkew):
		add("retention", "%v is shorter than misfire_grace + max_skew (%v + %v)", j.Retention, j.MisfireGrace, maxSkew)
	case j.CatchupWindow > 0 && j.Retention < addSaturating(j.CatchupWindow, maxSkew):
		add("retention", "%v is shorter than catchup_window + max_skew (%v + %v)", j.Retention, j.CatchupWindow, maxSkew)
	}
	// Slots are at least a second apart: a shorter window can't hold too
	// many, and counting a long one costs up to MaxCatchupSlots calls of
	// Next, so only those are counted.
	if sched, err := ParseSchedule(j.Schedule); err == nil && j.CatchupWindow >= MaxCatchupSlots*time.Second {
		if n := slotsWithin(sched, j.CatchupWindow, MaxCatchupSlots+1); n > MaxCatchupSlots {
			add("catchup_window", "%v of %q holds more than %d slots, too many to record at start (each missed slot gets a record); shorten it",
				j.CatchupWindow, j.Schedule, MaxCatchupSlots)
		}
	}
	return errs
}

// slotsWithin counts the slots of sched in the longest window of length d
// that it checks (the one ending now), up to limit.
func slotsWithin(sched Schedule, d time.Duration, limit int) int {
	if e, ok := sched.(everySchedule); ok {
		n := int64(d / e.period) // at most this many in (now-d, now], plus one if d isn't a multiple
		if d%e.period != 0 {
			n++
		}
		return int(min(n, int64(limit)))
	}
	end := time.Now()
	n := 0
	for s := sched.Next(end.Add(-d)); !s.IsZero() && !s.After(end) && n < limit; s = sched.Next(s) {
		n++
	}
	return n
}

// jobErrors formats a job's FieldErrors for New.
func jobErrors(j Job, errs []FieldError) error {
	var out []error
	for _, e := range errs {
		out = append(out, fmt.Errorf("job %q: %w", j.Name, e))
	}
	return errors.Join(out...)
}

// addSaturating returns a + b, or the longest (shortest) duration if the sum
// is past it: a sum of durations from a config must not wrap around and
// make a check pass.
func addSaturating(a, b time.Duration) time.Duration {
	switch s := a + b; {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	default:
		return s
	}
}

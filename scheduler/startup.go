package scheduler

import (
	"container/heap"
	"context"
	"log/slog"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// awaitProtocol waits, before anything is read or claimed, while replicas of
// an older slot protocol are live (their heartbeats say so): they keep their
// state where this version does not look, so the two must not claim side by
// side. It heartbeats every period meanwhile; once they have left, startup
// takes in what they left (JobStates). False when ctx ended first.
func (r *runner) awaitProtocol(ctx context.Context) bool {
	for len(r.s.olderPeers()) > 0 {
		if !r.sleep(ctx, r.s.cfg.heartbeatEvery) {
			return false
		}
		hctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
		if err := r.s.heartbeat(hctx); err != nil && ctx.Err() == nil {
			r.log.Warn("heartbeat failed", "error", err)
		}
		cancel()
	}
	return ctx.Err() == nil
}

// startupStep is one step of startup, retried until Redis answers.
type startupStep struct {
	what string
	do   func(context.Context) error
}

// startup readies the protocol, measures the clock, waits while replicas of
// an older protocol are live (with its clock measured, this replica reports
// ready meanwhile, so that a rolling update goes on and stops them), and
// plans every job, retrying each step until Redis answers; false when ctx
// ended first.
func (r *runner) startup(ctx context.Context) bool {
	var states map[string]slot.JobState
	ready := []startupStep{
		{"load scripts", r.s.claimer.Prepare},
		{"measure the clock against Redis", r.s.probe},
	}
	read := []startupStep{
		{"read the jobs' latest and running slots", func(ctx context.Context) (err error) {
			r.planned = r.clock.Now()
			states, err = r.s.claimer.JobStates(ctx, r.s.jobNames())
			return err
		}},
	}
	if !r.steps(ctx, ready) || !r.awaitProtocol(ctx) || !r.steps(ctx, read) {
		return false
	}
	// Planned on the clock as measured: a step since the probe (an NTP step
	// at boot) is measured first. start is this replica's clock, or, while
	// it is off by more than max_skew, Redis's (runnerClock): a clock an
	// hour ahead would take the next hour's slots for missed ones, and one
	// behind would not see the outage.
	if r.stepped() && !r.steps(ctx, []startupStep{{"measure the clock against Redis again", r.s.probe}}) {
		return false
	}
	start := r.clock.Now()
	for _, j := range r.s.jobs {
		p := planStartup(j.Job, j.sched, states[j.Name], start, r.s.cfg.maxSkew, olderLimit(len(r.s.jobs)))
		if !p.live.IsZero() {
			heap.Push(&r.next, newNextSlot(p.live, j))
		}
		for _, at := range p.check {
			r.watching[target{at: at}.key(j.Name)] = true
			r.push(start, j, r.claim(slot.ClaimTakeover, j, at))
		}
		for _, id := range states[j.Name].RunningManual {
			t := target{manual: id}
			r.watching[t.key(j.Name)] = true
			r.push(start, j, r.takeover(j, t))
		}
		if len(p.miss) > 0 {
			r.backlog[j] = &backlog{slots: p.miss, old: p.old} // recorded after the live slots and the catch-up run, a batch at a time
		}
		if len(p.run) > 0 {
			r.catchup[j] = p.run // the first in flight
			r.push(start, j, r.claim(slot.ClaimCatchup, j, p.run[0]))
		}
		if rg, ok := p.outage(); ok {
			r.outage[j] = rg
			r.s.catchups.publish(j.Name, rg, len(p.run) > 0)
		}
		if len(p.miss)+len(p.run) > 0 {
			level := slog.LevelInfo
			if len(p.miss) > 0 { // slots no replica ran: each will be recorded missed, unless one did
				level = slog.LevelWarn
			}
			r.log.Log(context.Background(), level, "catching up", "slotcron.job", j.Name, "catchup", string(j.Catchup),
				"run", len(p.run), "missed", len(p.miss), "older_than_window", p.old, "since", states[j.Name].Last.UTC().Format(time.RFC3339))
		}
		r.logUnrecorded(j, p)
	}
	r.planOlder(start, r.s.jobs, states) // runs that replicas of an older protocol still finish
	switch {
	case len(r.backlog) > 0:
		// Whom this replica knows of is the registry it read as it
		// registered: of replicas that start together, the first knew of
		// none of the others, and would send every slot of the backlog as
		// its own share (drainBacklog). Read again, they have registered
		// meanwhile. A heartbeat that fails leaves the registry as it was;
		// it waits a second at most, as live slots may be due.
		r.beat(ctx, min(r.s.cfg.claimTimeout, time.Second),
			"cannot read the registry again before recording the outage's slots: sending them as this replica knows its peers")
	case len(r.outage) > 0:
		// The registration's heartbeat, sent before the plan, published no
		// outage: published now, before the first claim of its catch-up
		// (whose live slots then move the job's state past the outage, so
		// that no later start plans it), so that a kill before the next
		// heartbeat leaves its slots to a peer or a successor to record.
		r.beat(ctx, min(r.s.cfg.claimTimeout, time.Second),
			"cannot publish the outage this replica catches up before claiming its slots: until a heartbeat does, a kill leaves them unrecorded")
	}
	r.log.Info("scheduler started", "jobs", len(r.s.jobs))
	return true
}

// steps runs each step in turn, retrying a step until Redis answers; false
// when ctx ended first.
func (r *runner) steps(ctx context.Context, steps []startupStep) bool {
	for _, st := range steps {
		for tries := 0; ; tries++ {
			sctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
			err := st.do(sctx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return false
			}
			r.log.Error("scheduler start: cannot "+st.what+"; retrying", "error", err)
			if !r.sleep(ctx, backoff(tries)) {
				return false
			}
		}
	}
	return true
}

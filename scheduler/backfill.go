package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/slotcron/slotcron/slot"
)

// BackfillSlot is what a backfill, or a manual run (RunManual), did with one
// slot.
type BackfillSlot struct {
	Slot    time.Time    // a won manual slot's is its record's (Redis's clock); else the slot's as asked for
	Outcome slot.Outcome // won: this process ran it; lost: it had a record (not missed); paused: recorded paused; skipped: recorded skipped
	State   slot.State   // won: the state the run finished with ("running": left for a takeover); else the record's
	Holder  string       // lost: the record's owner; skipped: the replica whose run holds the job
	RunID   string       // won: the run's ID
	Err     error        // the claim could not be made
}

// Backfill runs job for each of slots that never started, oldest first, in
// this process: each slot that has no record, or is recorded missed (a
// missed record is only written where no claim had won the slot, as when
// replicas that start after an outage record the slots older than the
// catch-up window). It runs them through the same slot protocol as the
// scheduled slots: each is claimed (as a catch-up slot: it waits while a run
// holds the job, and has no misfire deadline; and it may win over a missed
// record, slot.Claim.OverMissed, which then becomes the run's record),
// fenced, traced and recorded, and runs at most once across every replica
// and every concurrent backfill. A slot with any other record (running,
// done, failed, abandoned, skipped, paused) is left alone: lost. At most
// parallel run at once (a job with overlap: skip runs one at a time anyway).
// It returns when every slot has been dealt with, or ctx ends. A Scheduler
// either Runs, Backfills or RunManuals, once.
//
// Each slot must be one of the job's schedule's times, no later than now
// and within the job's retention less max_skew, both on Redis's clock
// (Backfill measures this process's clock against it first, and claims
// nothing when they are further apart than max_skew): else nothing is
// claimed, and the error names the slot. Redis checks both again as it
// decides each claim, so a slot that ages past the retention while the
// backfill waits for earlier runs, or a clock that steps meanwhile, claims
// nothing: that slot's Err wraps slot.ErrPastRetention, or says that it is
// in the future. It claims nothing while a replica of an older slot
// protocol is live: it reads the registry before its first claim and again
// once a heartbeat period has passed, and returns an error wrapping
// ErrOlderProtocol when it finds one (the runs under way end first; the
// slots it did not reach have an empty Outcome). ErrRunning: the Scheduler
// has run.
func (s *Scheduler) Backfill(ctx context.Context, job string, slots []time.Time, parallel int) ([]BackfillSlot, error) {
	j := s.job(job)
	if j == nil {
		return nil, fmt.Errorf("scheduler: Backfill: no job %q in the table", job)
	}
	if parallel < 1 {
		return nil, fmt.Errorf("scheduler: Backfill: parallel must be >= 1, got %d", parallel)
	}
	for i, at := range slots {
		if !j.sched.Next(at.Add(-time.Second)).Equal(at) {
			return nil, fmt.Errorf("scheduler: Backfill: slot %d, %s, is not a time of the schedule %q; nothing was claimed",
				i, at.UTC().Format(time.RFC3339Nano), j.Schedule)
		}
	}
	now, err := s.redisNow(ctx, "Backfill")
	if err != nil {
		return nil, err
	}
	for i, at := range slots {
		var why string
		switch {
		case at.After(now):
			why = "is in the future on Redis's clock: the replicas run it at its time (run now, it would close that slot early)"
		case at.Before(now.Add(-j.Retention + s.cfg.maxSkew)):
			why = fmt.Sprintf("is older than the job's retention (%v), less max_skew (%v), allows on Redis's clock: its record may have expired, and a slot that ran would run again",
				j.Retention, s.cfg.maxSkew)
		}
		if why != "" {
			return nil, fmt.Errorf("scheduler: Backfill: slot %d, %s, %s; nothing was claimed", i, at.UTC().Format(time.RFC3339Nano), why)
		}
	}
	out, err := s.oneShot(ctx, "Backfill", j, len(slots), parallel, func(r *runner, i int) slot.Claim {
		c := r.claim(slot.ClaimCatchup, j, slots[i])
		// Redis refuses it, recording nothing, should the slot be in its
		// future or past the retention less this when it is claimed.
		c.MaxEarly = s.cfg.maxSkew
		// A slot recorded missed never started: a backfill runs it.
		c.OverMissed = true
		return c
	})
	for i := range out {
		if out[i].Slot.IsZero() { // not reached: ctx ended, or the backfill stopped
			out[i].Slot = slots[i]
		}
	}
	return out, err
}

// RunManual runs a manual slot of job in this process, like Trigger, for a
// process that does not Run the table (a command line's "run now"): m names
// the slot (m.ID, or a new UUIDv7 when empty: see Trigger) and says who
// asked. It returns when the run has ended, or at once when the slot was not
// this process's to run (it has a record, the job is paused, or another run
// holds it under overlap skip). The ID is in the result's RunID's slot record:
// read it with the store. As Backfill, it claims nothing, and returns an
// error wrapping ErrOlderProtocol, while a replica of an older slot
// protocol is live.
func (s *Scheduler) RunManual(ctx context.Context, job string, m slot.Manual) (slot.Manual, BackfillSlot, error) {
	j := s.job(job)
	if j == nil {
		return m, BackfillSlot{}, fmt.Errorf("scheduler: RunManual: no job %q in the table", job)
	}
	m, err := checkManual(m)
	if err != nil {
		return m, BackfillSlot{}, fmt.Errorf("scheduler: RunManual: %w", err)
	}
	out, err := s.oneShot(ctx, "RunManual", j, 1, 1, func(r *runner, _ int) slot.Claim {
		c := r.claim(slot.ClaimManual, j, r.clock.Now())
		c.Manual = &m
		return c
	})
	if len(out) == 0 {
		return m, BackfillSlot{}, err
	}
	return m, out[0], err
}

// redisNow measures this process's clock against Redis's, as a replica does
// before it claims, and returns the time on Redis's clock. A process whose
// clock is further off than max_skew claims nothing, as a replica would not:
// the error says by how much.
func (s *Scheduler) redisNow(ctx context.Context, what string) (time.Time, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.claimTimeout)
	defer cancel()
	if err := s.probe(pctx); err != nil {
		return time.Time{}, fmt.Errorf("scheduler: %s: cannot measure this machine's clock against Redis's: %w; nothing was claimed", what, err)
	}
	offset, off := s.refused()
	if off {
		side := "behind"
		if offset < 0 {
			side = "ahead of"
		}
		return time.Time{}, fmt.Errorf("scheduler: %s: this machine's clock is %v %s Redis's, more than max_skew (%v): fix its clock; nothing was claimed",
			what, max(offset, -offset).Round(time.Millisecond), side, s.cfg.maxSkew)
	}
	return s.cfg.clock.Now().Add(offset), nil
}

// checkManual gives m an ID if it has none, and checks it.
func checkManual(m slot.Manual) (slot.Manual, error) {
	if m.ID == "" {
		m.ID = uuid.Must(uuid.NewV7()).String()
	}
	if err := slot.CheckManualID(m.ID); err != nil {
		return m, err
	}
	return m, errors.Join(slot.CheckNote("the note", m.Note), slot.CheckNote("by", m.By))
}

// job returns the table's job by name, or nil.
func (s *Scheduler) job(name string) *jobState {
	for _, js := range s.jobs {
		if js.Name == name {
			return js
		}
	}
	return nil
}

// oneShot claims n slots of j, made by claimAt, oldest first, and runs those
// it wins in this process, at most parallel at once, without running the
// table: what Backfill and RunManual share.
func (s *Scheduler) oneShot(ctx context.Context, what string, j *jobState, n, parallel int, claimAt func(*runner, int) slot.Claim) ([]BackfillSlot, error) {
	if !s.started.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	s.started0 = s.cfg.clock.Now()
	if err := s.claimer.Prepare(ctx); err != nil {
		return nil, fmt.Errorf("scheduler: %s: %w", what, err)
	}
	r := newRunner(s)
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); r.renew.loop(bg) }()
	go func() { defer bgWG.Done(); r.finisher.loop(bg) }()
	defer func() {
		close(r.loopDone)
		r.drain()
		stopBG()
		bgWG.Wait()
		r.kill()
	}()

	out := make([]BackfillSlot, n)
	index := map[string]int{} // by token: each claim has its own
	inflight := 0
	ended := func(ev runEnded) {
		inflight--
		st := ev.state
		if ev.leftRunning() {
			st = slot.StateRunning
		}
		out[index[ev.claim.Token]].State = st
	}
	gate := &olderGate{r: r, what: what}
	var stopped error // the gate's: no more claims
	cancelled := func() ([]BackfillSlot, error) { return out, errors.Join(stopped, ctx.Err()) }
	for next := 0; next < n || inflight > 0; {
		if next < n && inflight < parallel {
			c := claimAt(r, next)
			out[next].Slot = c.Slot
			index[c.Token] = next
			res, wait, err := r.claimOne(ctx, j, c, &out[next], gate)
			switch {
			case ctx.Err() != nil:
				return cancelled()
			case err != nil:
				// Claim no more; the runs under way end as usual. A slot
				// that was waiting for a run to end is not reached.
				stopped, n = err, next
				out[next] = BackfillSlot{Slot: c.Slot}
			case res == slot.OutcomeWon:
				inflight++
				next++
			case res == slot.OutcomePaused && c.Kind != slot.ClaimManual:
				// Paused meanwhile: its slot is recorded paused, which no
				// backfill runs again, and so would each one claimed from
				// now on. Claim no more, and say so; the runs under way end
				// as usual. (A trigger's one manual slot answers paused.)
				stopped = fmt.Errorf("the job was paused during the backfill: its slot %s is recorded paused, and the later ones, if any, are not reached; "+
					"resume the job and backfill again (the paused slot stays paused)", c.Slot.UTC().Format(time.RFC3339))
				next++
				n = next
			case wait > 0: // busy: a run holds the job
				if inflight > 0 {
					select {
					case ev := <-r.runEnded:
						ended(ev)
					case <-ctx.Done():
						return cancelled()
					}
				} else if !r.sleep(ctx, wait) {
					return cancelled()
				}
			default:
				next++
			}
			continue
		}
		select {
		case ev := <-r.runEnded:
			ended(ev)
		case <-ctx.Done():
			return cancelled()
		}
	}
	return out, stopped
}

// claimOne claims one slot (a catch-up or a manual slot) and starts its run
// if it wins. It returns the outcome, and how long to wait before trying
// again when a run holds the job; or the gate's error, claiming nothing,
// when a replica of an older protocol is live (each try asks the gate).
func (r *runner) claimOne(ctx context.Context, j *jobState, c slot.Claim, out *BackfillSlot, gate *olderGate) (slot.Outcome, time.Duration, error) {
	name := kindBackfill
	if c.Kind == slot.ClaimManual {
		name = kindManual
	}
	for tries := 0; ; tries++ {
		if err := gate.check(ctx); err != nil {
			return "", 0, err
		}
		st := r.s.tel.beginSlot(ctx, name, c)
		claiming([]*slotTrace{st})
		// As the run loop's (claimBatch): a stop does not cut off a claim
		// in flight, which Redis may run, and win with its answer dropped,
		// leaving the slot running with no run behind it; one not sent
		// before the stop is not sent.
		base := ctx
		if ctx.Err() == nil {
			base = context.WithoutCancel(ctx)
		}
		cctx, cancel := context.WithTimeout(base, r.s.cfg.claimTimeout)
		results, err := r.s.claimer.Claim(cctx, []slot.Claim{c})
		cancel()
		var res slot.Result
		if err == nil {
			res = results[0]
			err = res.Err
		}
		st.answered(res, nil)
		switch {
		case errors.Is(err, slot.ErrPastRetention):
			st.end(ending{outcome: outcomeError, err: err})
			out.Err = err
			return "", 0, nil
		case err == nil && res.Outcome == slot.OutcomeEarly:
			err = fmt.Errorf("the slot is %v ahead of Redis's clock: the replicas run it at its time; nothing was recorded", res.Wait)
			st.end(ending{outcome: outcomeError, err: err})
			out.Err = err
			return "", 0, nil
		case err != nil && tries < 5 && ctx.Err() == nil:
			st.end(ending{outcome: outcomeError, err: err})
			if !r.sleep(ctx, backoff(tries)) {
				return "", 0, nil
			}
			continue
		case err != nil:
			st.end(ending{outcome: outcomeError, err: err})
			// A try may have reached Redis and won with its reply lost: the
			// slot is then recorded running with no run behind it, and the
			// live replicas settle it (watchAll) by the job's policy.
			out.Err = fmt.Errorf("no answer after %d tries: %w (if a try reached Redis and won, the slot is recorded running "+
				"until a live replica settles it by on_owner_lost, within about %v and a lease TTL)", tries+1, err, runningSweepEvery)
			return "", 0, nil
		}
		out.Outcome, out.Holder, out.State = res.Outcome, res.Holder, res.State
		switch res.Outcome {
		case slot.OutcomeWon:
			// A manual slot's time is its record's (Redis's clock), not the claim's.
			out.RunID, out.Slot = res.Lease.RunID(), res.Lease.Slot()
			r.log.Info(name+": running the slot", "slotcron.job", j.Name, "slotcron.slot", out.Slot.UTC().Format(time.RFC3339),
				"slotcron.run_id", out.RunID)
			r.start(j, c, res.Lease, st)
			return res.Outcome, 0, nil
		case slot.OutcomeBusy:
			st.end(ending{outcome: string(res.Outcome), holder: res.Holder})
			// Runs are usually far shorter than the lease the holder has
			// left: look again soon rather than after all of it.
			return res.Outcome, min(max(res.Wait, 10*time.Millisecond), 250*time.Millisecond), nil
		case slot.OutcomePaused:
			out.State = slot.StatePaused
		case slot.OutcomeSkipped:
			out.State = slot.StateSkipped
		}
		st.end(ending{outcome: string(res.Outcome), holder: res.Holder, fence: res.Fence, attempt: res.Attempt})
		return res.Outcome, 0, nil
	}
}

// ErrNotRunning: Trigger was called on a Scheduler whose Run has not started
// its loop yet, or has returned.
var ErrNotRunning = errors.New("scheduler: not running")

// Triggered is what a Trigger did: the manual slot it asked for, and the
// answer to its claim on this replica.
type Triggered struct {
	Manual  slot.Manual
	Slot    time.Time    // won: the run's Slot, its record's (Redis's clock); else when it was asked for, on this replica's clock
	Outcome slot.Outcome // won: this replica runs it; lost: it has a record (asked for before); skipped; paused
	Holder  string       // lost: the record's owner; skipped: the replica whose run holds the job
	State   slot.State   // lost: the record's state
	RunID   string       // won: the run's ID
	Reason  string       // paused: the pause, as recorded
}

// triggerReq is a Trigger, handed to the loop.
type triggerReq struct {
	job   *jobState
	m     slot.Manual
	reply chan slot.Result
	gone  <-chan struct{} // closed when the caller stops waiting
	at    time.Time       // the manual slot's time: when it was asked for
}

// Trigger asks for a manual slot of job now, on a running Scheduler (Run):
// the slot is claimed through the same protocol as a scheduled slot (its own
// record, fenced, traced, exactly once across every replica for one m.ID)
// and, when this replica wins it, run here. The job's overlap policy applies
// between it and any other run of the job, and a paused job records it
// paused. m.ID is the idempotency key: a Trigger with an ID that has a
// record (on any replica, within the job's retention) runs nothing and
// answers lost, with the record's owner and state. An empty ID gets a new
// UUIDv7: every such Trigger is a slot of its own.
//
// Trigger returns once Redis has answered the claim; the run goes on in the
// background, like a scheduled run, and ends with a record. It returns
// ErrNotRunning when the Scheduler is not running its table, and an error
// wrapping ErrOlderProtocol, claiming nothing, while its last heartbeat
// found replicas of an older slot protocol live.
func (s *Scheduler) Trigger(ctx context.Context, job string, m slot.Manual) (Triggered, error) {
	j := s.job(job)
	if j == nil {
		return Triggered{}, fmt.Errorf("scheduler: Trigger: no job %q in the table", job)
	}
	m, err := checkManual(m)
	if err != nil {
		return Triggered{}, fmt.Errorf("scheduler: Trigger: %w", err)
	}
	select {
	case <-s.loopDone:
		return Triggered{Manual: m}, ErrNotRunning
	default:
	}
	if older := s.olderPeers(); len(older) > 0 { // a replica waiting for them to leave is not looping yet
		return Triggered{Manual: m}, fmt.Errorf("%w (%s): Trigger claims nothing until they have left", ErrOlderProtocol, strings.Join(older, ", "))
	}
	req := triggerReq{job: j, m: m, reply: make(chan slot.Result, 1), gone: ctx.Done(), at: s.cfg.clock.Now()}
	if !s.looping.Load() {
		return Triggered{Manual: m}, ErrNotRunning
	}
	select {
	case s.triggers <- req:
	case <-s.loopDone:
		return Triggered{Manual: m}, ErrNotRunning
	case <-ctx.Done():
		return Triggered{Manual: m}, ctx.Err()
	}
	t := Triggered{Manual: m, Slot: req.at}
	select {
	case res := <-req.reply:
		if res.Err != nil { // refused by the store
			return t, fmt.Errorf("scheduler: Trigger: %w", res.Err)
		}
		t.Outcome, t.Holder, t.State, t.Reason = res.Outcome, res.Holder, res.State, res.Reason
		if res.Outcome == slot.OutcomeWon {
			t.RunID, t.Slot = res.Lease.RunID(), res.Lease.Slot()
		}
		return t, nil
	case <-s.loopDone:
		return t, ErrNotRunning
	case <-ctx.Done():
		// The claim is withdrawn (pending.withdraw): the slot runs only if
		// a try had won, and is recorded missed otherwise.
		return t, fmt.Errorf("scheduler: Trigger: %w before Redis answered the claim of manual slot %s: it runs only if a try reached Redis and won; else it is recorded missed", ctx.Err(), m.ID)
	}
}

// onTrigger queues a Trigger's claim, due now.
func (r *runner) onTrigger(now time.Time, req triggerReq) {
	c := r.claim(slot.ClaimManual, req.job, req.at)
	m := req.m
	c.Manual = &m
	heap.Push(&r.queue, &pending{due: now, job: req.job, claim: c, reply: req.reply, gone: req.gone})
}

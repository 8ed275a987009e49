package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
)

// finishTimeout bounds recording a run's outcome, on a context that outlives
// the scheduler's.
const finishTimeout = 5 * time.Second

// start runs a won slot in its own goroutine, which owns the slot's trace
// from now on.
func (r *runner) start(j *jobState, c slot.Claim, lease slot.Lease, st *slotTrace) {
	st.startRun()
	st.manualRun(lease)
	// From here until its outcome is recorded the slot is this run's: the
	// reads of the running slots and this replica's takeovers leave it alone.
	key := targetOf(c).key(j.Name)
	r.runs.add(key)
	r.renew.add(lease, st)
	r.jobsWG.Add(1)
	r.finisher.going.Add(1)
	go func() {
		defer r.jobsWG.Done()
		state := r.execute(j, c.Slot, c.Ahead, lease, st)
		r.finisher.going.Add(-1)
		r.runs.remove(key)
		r.ended(runEnded{job: j, claim: c, state: state})
	}()
}

// execute runs the job, due at due on this replica's clock, under a context
// that ends on timeout, on shutdown (after the grace) or on lease loss,
// records the outcome and ends the slot's trace. It returns the final state the run recorded (or tried to), or ""
// when it left the slot running for a takeover.
func (r *runner) execute(j *jobState, due time.Time, ahead bool, lease slot.Lease, st *slotTrace) slot.State {
	manual := lease.Manual() // the record's: a retry attempt's claim names only the ID
	run := jobs.Run{Job: j.Name, Slot: lease.Slot(), Attempt: lease.Attempt(), Fence: lease.Fence(),
		Replica: r.self, Token: lease.Token(), RunID: lease.RunID(), Manual: manual}
	defer st.end(ending{outcome: string(slot.OutcomeWon), holder: r.self, fence: run.Fence, attempt: run.Attempt})
	log := r.log
	if log.Enabled(context.Background(), slog.LevelError) { // a logger that keeps nothing needs no attributes
		log = log.With("slotcron.job", j.Name, "slotcron.slot", run.Slot.UTC().Format(time.RFC3339),
			"slotcron.fence", run.Fence, "slotcron.attempt", run.Attempt, "slotcron.run_id", run.RunID)
		if manual != nil {
			log = log.With("slotcron.manual_id", manual.ID)
		}
	}
	run.Logger = log

	// Record a loss when it happens, whatever ended the lease: a failed token
	// check, or the TTL running out while renewals hang.
	reportLoss := func(msg string, cause error) {
		r.s.tel.lost(j.Name)
		st.lost(cause)
		log.Error(msg, "error", cause)
		r.s.emit(slotEvent(EventLeaseLost, claimOf(j, lease), run.Attempt, run.Fence, run.RunID, cause.Error()))
	}
	settleLoss := watchLoss(lease.Context(), func(cause error) {
		reportLoss("lease lost: the job's context is cancelled", cause)
	})
	ctx, cancel := context.WithCancelCause(lease.Context())
	defer cancel(nil)
	stop := context.AfterFunc(r.killCtx, func() { cancel(ErrShutdown) })
	defer stop()
	// The job's spans go under job.run; its context ends with the lease.
	ctx = jobs.WithRun(trace.ContextWithSpan(ctx, trace.SpanFromContext(st.runCtx)), run)
	ctx, result := jobs.CaptureResult(ctx)

	// A claim sent ahead won before the slot's time: the run waits for it.
	// Only that one: a claim sent at or after its slot's time starts its run
	// at once, whatever the clock does meanwhile.
	var err error
	if ahead {
		err = r.waitForSlot(ctx, run.Slot)
	}
	if err == nil && (!lease.Proven() || ctx.Err() != nil) {
		// The lease ran out before the run could start (the claim's reply
		// came later than a lease TTL after it was sent, or the process
		// paused past it), or the grace after a shutdown has: the job is
		// not called on it. Proven ends a lease whose time has run out
		// even if its timer has yet to fire (a pause past both the slot's
		// time and the lease's end leaves two timers due at once: which
		// fires first is the Go scheduler's choice). A lost lease leaves
		// the slot to its policy, as a loss mid-run does.
		err = context.Cause(ctx)
	}
	began := time.Now()
	if err != nil {
		err = fmt.Errorf("the job did not start: its context ended before it could: %w", err)
		log.Warn("won slot not started", "error", err)
	} else {
		delay := r.clock.Now().Sub(due) // on this replica's clock: a manual slot's run.Slot is on Redis's
		r.s.tel.dispatched(j.metrics, delay)
		st.jobStarted(delay)
		if log.Enabled(context.Background(), slog.LevelInfo) { // a Duration's String costs; most tables log no INFO
			log.Info("job started", "dispatch_delay", delay.String())
		}
		err = j.fn(ctx, run) // j.fn recovers panics and applies the timeout (jobs middleware)
	}
	took := time.Since(began)
	// As at the start: a lease whose time ran out as the job returned ends
	// now, though its timer may not have fired (the two are due at once),
	// so that the loss is seen and recorded, not finished over as done.
	lease.Proven()
	lost := settleLoss() // a loss is recorded, and on the run span, before it ends
	r.renew.remove(lease)

	state, text := outcome(err, ctx, lost, j.OnOwnerLost)
	st.runDone(lease, err, text)
	if state == "" {
		log.Warn("lease lost mid-run; leaving the slot to a takeover", "error", text)
		r.s.tel.ran(j.metrics, string(slot.StateAbandoned), took)
		return ""
	}
	r.s.tel.ran(j.metrics, string(state), took)
	ferr := st.finishing(state, func() error { return r.finish(log, j.metrics, lease, state, text, result()) })
	unseen := errors.Is(ferr, slot.ErrLeaseLost) && !lost
	if unseen {
		// Redis held the lease lapsed, or another run's, while this
		// replica held it: a takeover or another run acted on it before
		// a renewal could tell, and the job had returned.
		reportLoss("lease lost: Redis let it lapse while this replica held it, and the finish found it so; "+
			"another run of the job may have started meanwhile", ferr)
	}
	if errors.Is(ferr, slot.ErrLeaseLost) && !errors.Is(ferr, slot.ErrNotHeld) && !errors.Is(ferr, slot.ErrUnreplicated) {
		ferr = nil // the record holds the run's end all the same
	}
	if errors.Is(ferr, slot.ErrDataLoss) {
		r.s.runDataLoss(lease, "a finished run's slot record is gone, or another run's took its place", "slotcron.job", j.Name,
			"slotcron.slot", run.Slot.UTC().Format(time.RFC3339), "state", string(state), "error", ferr)
		if !errors.Is(ferr, slot.ErrNotHeld) && !errors.Is(ferr, slot.ErrUnreplicated) {
			ferr = nil // the record was gone, and now holds the run's end: the run is reported as finished too
		}
	}
	switch {
	case ferr == nil:
		level := slog.LevelInfo
		switch state {
		case slot.StateFailed:
			level = slog.LevelWarn
		case slot.StateAbandoned:
			level = slog.LevelError
		}
		if log.Enabled(context.Background(), level) {
			log.Log(context.Background(), level, "job finished", "state", string(state), "took", took.String(), "error", text)
		}
	case errors.Is(ferr, slot.ErrUnreplicated):
		// (Written anew after a loss, reported above, it may be lost again.)
		r.s.tel.recordUnreplicated(j.Name)
		log.Error("job finished, but fewer replicas acknowledged its record than wait_replicas asks: a failover now could lose the record",
			"state", string(state), "took", took.String(), "error", text, "replication", ferr)
	case errors.Is(ferr, slot.ErrDataLoss): // reported above
		return state
	case errors.Is(ferr, slot.ErrNotHeld) && unseen: // reported above
	case errors.Is(ferr, slot.ErrNotHeld):
		log.Warn("job finished, but the slot is no longer this run's; its record stands", "state", string(state), "error", ferr)
	default:
		// Only at shutdown, once the grace has passed: the slot is left
		// running, and a takeover settles it (the peers watch the running
		// slots of a replica that leaves; this one's next start does too).
		log.Error("job finished, but its outcome could not be recorded before the shutdown; the record stays running until a takeover settles it",
			"state", string(state), "error", ferr)
		return ""
	}
	if errors.Is(ferr, slot.ErrNotHeld) {
		return state
	}
	// The record holds the run's end (unacknowledged by the replicas, it
	// is recorded all the same): the operator hears of a failure.
	switch state {
	case slot.StateFailed:
		e := slotEvent(EventFailed, claimOf(j, lease), run.Attempt, run.Fence, run.RunID, text)
		e.Result = result()
		r.s.emit(e)
	case slot.StateAbandoned:
		r.s.emit(slotEvent(EventAbandoned, claimOf(j, lease), run.Attempt, run.Fence, run.RunID, text))
	}
	return state
}

// watchLoss calls record, once, when ctx (a lease's) ends with a lost
// lease, as soon as it ends. settle, called once the run has returned, sees
// to it that record has been called by then if the lease was lost, or calls
// it: a run that returns as soon as its context ends can get there before
// the watch has started (ctx's cancellation reaches its children in no set
// order, the run's context and the watch among them), and stopping the
// watch then must not lose the loss. settle reports whether the lease was
// lost (and recorded): a loss after it is none of the run's, which has
// returned, and its outcome must not say otherwise unrecorded.
func watchLoss(ctx context.Context, record func(cause error)) (settle func() (lost bool)) {
	var lost bool
	once := sync.OnceFunc(func() {
		if cause := context.Cause(ctx); errors.Is(cause, slot.ErrLeaseLost) {
			lost = true
			record(cause)
		}
	})
	stop := context.AfterFunc(ctx, once)
	return func() bool {
		stop()
		if ctx.Err() == nil {
			return false // the watch never ran, nor will: not lost
		}
		once() // runs record, or waits until the watch's call has
		return lost
	}
}

// finish records the outcome through the finisher. It tries until Redis
// answers (the finish script is idempotent: a finish whose reply was lost
// is recognised when sent again), or the shutdown grace has passed: a run's
// outcome is not dropped for a Redis that is down for a while, and the slot
// must not stay running with nothing to settle it. Each failure is counted
// (slotcron_finish_errors_total), and logged at ERROR after the third and
// every tenth.
func (r *runner) finish(log *slog.Logger, m *jobMetrics, lease slot.Lease, state slot.State, text, result string) error {
	for tries := 0; ; tries++ {
		err := r.finisher.finish(slot.FinishRequest{Lease: lease, State: state, Error: text, Result: result})
		if err == nil || errors.Is(err, slot.ErrNotHeld) || errors.Is(err, slot.ErrUnreplicated) || errors.Is(err, slot.ErrDataLoss) ||
			errors.Is(err, slot.ErrLeaseLost) {
			if err == nil && tries >= finishLoud {
				log.Info("a run's outcome is recorded after all", "state", string(state), "tries", tries+1)
			}
			return err
		}
		r.s.tel.finishFailed(m)
		if tries+1 >= finishLoud && (tries+1-finishLoud)%10 == 0 {
			log.Error("cannot record a run's outcome; trying again until Redis answers (the slot stays running meanwhile)",
				"state", string(state), "tries", tries+1, "error", err)
		}
		t := r.clock.NewTimer(backoff(tries))
		select {
		case <-t.C():
		case <-r.killCtx.Done():
			t.Stop()
			return err
		}
	}
}

// finishLoud is the failed tries of a finish after which it logs at ERROR.
const finishLoud = 3

// outcome is the state to record for a run that returned err under ctx,
// having lost its lease (as settled: recorded) or not. It is "" when the
// lease was lost under on_owner_lost: retry, which leaves the slot running
// for a takeover.
func outcome(err error, ctx context.Context, lost bool, policy OwnerLost) (slot.State, string) {
	if err == nil {
		return slot.StateDone, ""
	}
	text := err.Error()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) && errors.Is(err, ctx.Err()) {
		text += " (" + cause.Error() + ")"
	}
	if lost {
		if policy == OwnerLostRetry {
			return "", text
		}
		return slot.StateAbandoned, text
	}
	return slot.StateFailed, text
}

// claimOf is the slot of a run, as a claim names it, for its events.
func claimOf(j *jobState, lease slot.Lease) slot.Claim {
	return slot.Claim{Job: j.Name, Slot: lease.Slot(), Manual: lease.Manual()}
}

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
)

// finishTimeout bounds recording a run's outcome, on a context that outlives
// the scheduler's.
const finishTimeout = 5 * time.Second

// start runs a won slot in its own goroutine.
func (r *runner) start(j *jobState, lease *locking.SlotLease, catchup bool, sctx context.Context, slotSpan trace.Span) {
	runCtx, runSpan := r.s.tel.startRun(sctx)
	r.renew.add(lease, runCtx)
	r.jobsWG.Add(1)
	go func() {
		defer r.jobsWG.Done()
		r.execute(j, lease, sctx, runCtx, runSpan, slotSpan)
		if catchup {
			r.post(func() { r.nextCatchup(r.clock.Now(), j) })
		}
	}()
}

// execute runs the job under a context that ends on timeout, on shutdown
// (after the grace) or on lease loss, and records the outcome.
func (r *runner) execute(j *jobState, lease *locking.SlotLease, sctx, runCtx context.Context, runSpan, slotSpan trace.Span) {
	run := jobs.Run{Job: j.Name, Slot: lease.Slot(), Attempt: lease.Attempt(), Fence: lease.Fence(),
		Replica: r.s.cfg.replica, Token: lease.Token()}
	log := r.log
	if log.Enabled(context.Background(), slog.LevelError) { // a logger that keeps nothing needs no attributes
		log = log.With("slotcron.job", j.Name, "slotcron.slot", run.Slot.UTC().Format(time.RFC3339),
			"slotcron.fence", run.Fence, "slotcron.attempt", run.Attempt)
	}
	r.s.tel.dispatched(j.Name, r.clock.Now().Sub(run.Slot))

	// Record a loss when it happens, whatever ended the lease: a failed token
	// check, or the TTL running out while renewals hang.
	lossRecorded := make(chan struct{})
	stopWatch := context.AfterFunc(lease.Context(), func() {
		defer close(lossRecorded)
		if cause := context.Cause(lease.Context()); errors.Is(cause, locking.ErrLeaseLost) {
			r.s.tel.lost(runCtx, lease, cause)
			log.Error("lease lost: the job's context is cancelled", "error", cause)
		}
	})
	ctx, cancel := context.WithCancelCause(lease.Context())
	defer cancel(nil)
	stop := context.AfterFunc(r.killCtx, func() { cancel(ErrShutdown) })
	defer stop()
	if j.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, j.Timeout, fmt.Errorf("%w after %v", jobs.ErrTimeout, j.Timeout))
		defer cancelT()
	}
	ctx = jobs.WithRun(trace.ContextWithSpan(ctx, runSpan), run)

	log.Info("job started", "dispatch_delay", r.clock.Now().Sub(run.Slot).String())
	began := time.Now()
	err := call(ctx, j.fn, run)
	took := time.Since(began)
	if !stopWatch() {
		<-lossRecorded // a loss is on the run span before it ends
	}
	r.renew.remove(lease)

	state, text := outcome(err, ctx, lease, j.OnOwnerLost)
	r.s.tel.endRun(runSpan, lease, err, text)
	if state == "" {
		// Lease lost under on_owner_lost: retry. The record stays running for
		// a takeover, by any replica, this one included.
		log.Warn("lease lost mid-run; leaving the slot to a takeover", "error", text)
		r.post(func() { r.watch(r.clock.Now(), j, run.Slot, -1) })
		r.s.tel.ran(j.Name, string(locking.StateAbandoned), took)
		r.s.tel.endSlot(slotSpan, j.Name, string(locking.OutcomeWon), r.s.cfg.replica, run.Fence, run.Attempt, nil)
		return
	}
	r.s.tel.ran(j.Name, string(state), took)
	ferr := r.finish(sctx, lease, state, text) // lock.finish is job.run's sibling under the slot span
	switch {
	case ferr == nil:
		log.Info("job finished", "state", string(state), "took", took.String(), "error", text)
	case errors.Is(ferr, locking.ErrNotHeld):
		log.Warn("job finished, but the slot is no longer this run's; its record stands", "state", string(state), "error", ferr)
	default:
		log.Error("job finished, but its outcome could not be recorded; the record stays running until a takeover settles it",
			"state", string(state), "error", ferr)
	}
	r.s.tel.endSlot(slotSpan, j.Name, string(locking.OutcomeWon), r.s.cfg.replica, run.Fence, run.Attempt, nil)
}

// finish records the outcome through the finisher, retrying network
// errors a few times.
func (r *runner) finish(ctx context.Context, lease *locking.SlotLease, state locking.SlotState, text string) error {
	_, span := r.s.tel.startFinish(ctx)
	var err error
	for tries := range 3 {
		err = r.finisher.finish(locking.FinishRequest{Lease: lease, State: state, Error: text})
		if err == nil || errors.Is(err, locking.ErrNotHeld) {
			break
		}
		time.Sleep(backoff(tries))
	}
	r.s.tel.endFinish(span, state, err)
	return err
}

// call runs fn, turning a panic into a *jobs.PanicError: a panicking job
// fails its run and never takes the process down.
func call(ctx context.Context, fn jobs.Func, run jobs.Run) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &jobs.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, run)
}

// outcome is the state to record for a run that returned err under ctx. It
// is "" when the lease was lost under on_owner_lost: retry, which leaves the
// slot running for a takeover.
func outcome(err error, ctx context.Context, lease *locking.SlotLease, policy OwnerLost) (locking.SlotState, string) {
	if err == nil {
		return locking.StateDone, ""
	}
	text := err.Error()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) && errors.Is(err, ctx.Err()) {
		text += " (" + cause.Error() + ")"
	}
	if errors.Is(context.Cause(lease.Context()), locking.ErrLeaseLost) {
		if policy == OwnerLostRetry {
			return "", text
		}
		return locking.StateAbandoned, text
	}
	return locking.StateFailed, text
}

package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// BackfillSlot is what a backfill did with one slot.
type BackfillSlot struct {
	Slot    time.Time
	Outcome slot.Outcome // won: this process ran it; lost: it had a record; paused: recorded paused
	State   slot.State   // won: the state the run finished with ("running": left for a takeover); else the record's
	Holder  string       // lost: the record's owner
	Err     error        // the claim could not be made
}

// Backfill runs job for each of slots that has no record, oldest first, in
// this process, through the same slot protocol as the scheduled slots: each
// is claimed (as a catch-up slot: it waits while a run holds the job, and has
// no misfire deadline), fenced, traced and recorded, and runs at most once
// across every replica. A slot that has a record is left alone. At most
// parallel run at once (a job with overlap: skip runs one at a time anyway).
// It returns when every slot has been dealt with, or ctx ends. A Scheduler
// either Runs or Backfills, once.
func (s *Scheduler) Backfill(ctx context.Context, job string, slots []time.Time, parallel int) ([]BackfillSlot, error) {
	var j *jobState
	for _, js := range s.jobs {
		if js.Name == job {
			j = js
		}
	}
	if j == nil {
		return nil, fmt.Errorf("scheduler: Backfill: no job %q in the table", job)
	}
	if parallel < 1 {
		return nil, fmt.Errorf("scheduler: Backfill: parallel must be >= 1, got %d", parallel)
	}
	if !s.started.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	s.started0 = s.cfg.clock.Now()
	if err := s.claimer.Prepare(ctx); err != nil {
		return nil, fmt.Errorf("scheduler: Backfill: %w", err)
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

	out := make([]BackfillSlot, len(slots))
	index := map[int64]int{}
	for i, at := range slots {
		out[i].Slot = at
		index[at.Unix()] = i
	}
	inflight := 0
	ended := func(ev runEnded) {
		inflight--
		st := ev.state
		if ev.leftRunning() {
			st = slot.StateRunning
		}
		out[index[ev.claim.Slot.Unix()]].State = st
	}
	for next := 0; next < len(slots) || inflight > 0; {
		if next < len(slots) && inflight < parallel {
			res, wait := r.backfillOne(ctx, j, slots[next], &out[next])
			switch {
			case ctx.Err() != nil:
				return out, ctx.Err()
			case res == slot.OutcomeWon:
				inflight++
				next++
			case wait > 0: // busy: a run holds the job
				if inflight > 0 {
					select {
					case ev := <-r.runEnded:
						ended(ev)
					case <-ctx.Done():
						return out, ctx.Err()
					}
				} else if !r.sleep(ctx, wait) {
					return out, ctx.Err()
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
			return out, ctx.Err()
		}
	}
	return out, nil
}

// backfillOne claims one slot as a catch-up slot and starts its run if it
// wins. It returns the outcome, and how long to wait before trying again
// when a run holds the job.
func (r *runner) backfillOne(ctx context.Context, j *jobState, at time.Time, out *BackfillSlot) (slot.Outcome, time.Duration) {
	c := r.claim(slot.ClaimCatchup, j, at)
	for tries := 0; ; tries++ {
		st := r.s.tel.beginSlot(ctx, "slot.backfill", j.Name, at)
		claiming([]*slotTrace{st})
		cctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
		results, err := r.s.claimer.Claim(cctx, []slot.Claim{c})
		cancel()
		var res slot.Result
		if err == nil {
			res = results[0]
			err = res.Err
		}
		st.answered(res, nil)
		switch {
		case err != nil && tries < 5 && ctx.Err() == nil:
			st.end(ending{outcome: outcomeError, err: err})
			if !r.sleep(ctx, backoff(tries)) {
				return "", 0
			}
			continue
		case err != nil:
			st.end(ending{outcome: outcomeError, err: err})
			out.Err = err
			return "", 0
		}
		out.Outcome, out.Holder, out.State = res.Outcome, res.Holder, res.State
		switch res.Outcome {
		case slot.OutcomeWon:
			r.log.Info("backfill: running the slot", "slotcron.job", j.Name, "slotcron.slot", at.UTC().Format(time.RFC3339))
			r.start(j, c, res.Lease, st)
			return res.Outcome, 0
		case slot.OutcomeBusy:
			st.end(ending{outcome: string(res.Outcome), holder: res.Holder})
			// Runs are usually far shorter than the lease the holder has
			// left: look again soon rather than after all of it.
			return res.Outcome, min(max(res.Wait, 10*time.Millisecond), 250*time.Millisecond)
		case slot.OutcomePaused:
			out.State = slot.StatePaused
		}
		st.end(ending{outcome: string(res.Outcome), holder: res.Holder, fence: res.Fence, attempt: res.Attempt})
		return res.Outcome, 0
	}
}

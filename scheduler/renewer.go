package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// renewer renews every lease the replica holds in one round trip per period.
// Its timer runs on the machine's clock whatever Clock the scheduler has:
// lease TTLs run in Redis, in real time. One mutex guards its leases.
type renewer struct {
	s      *Scheduler
	period time.Duration

	mu     sync.Mutex
	leases map[slot.Lease]*held
}

// held is a lease being renewed, with the trace its events go to.
type held struct {
	trace    *slotTrace
	renewals int
}

func newRenewer(s *Scheduler) *renewer {
	period := s.cfg.renewEvery
	if period == 0 {
		for _, j := range s.jobs {
			if p := DefaultRenewEvery(j.LeaseTTL); period == 0 || p < period {
				period = p
			}
		}
	}
	return &renewer{s: s, period: period, leases: map[slot.Lease]*held{}}
}

func (rn *renewer) add(l slot.Lease, st *slotTrace) {
	rn.mu.Lock()
	rn.leases[l] = &held{trace: st}
	rn.mu.Unlock()
}

func (rn *renewer) remove(l slot.Lease) {
	rn.mu.Lock()
	delete(rn.leases, l)
	rn.mu.Unlock()
}

// has reports whether l is still renewed: its run has not returned.
func (rn *renewer) has(l slot.Lease) bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	_, ok := rn.leases[l]
	return ok
}

// loop renews until ctx ends. After a failed round it tries again sooner, so
// that a short network fault costs no lease.
func (rn *renewer) loop(ctx context.Context) {
	t := time.NewTimer(rn.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rn.renewAll(ctx) {
			t.Reset(rn.period)
		} else {
			t.Reset(rn.period / 3)
		}
	}
}

// renewAll renews every lease once; false when some renewal got no answer.
func (rn *renewer) renewAll(ctx context.Context) bool {
	rn.mu.Lock()
	leases := make([]slot.Lease, 0, len(rn.leases))
	hs := make([]*held, 0, len(rn.leases))
	for l, h := range rn.leases {
		leases = append(leases, l)
		hs = append(hs, h)
	}
	rn.mu.Unlock()
	if len(leases) == 0 {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, rn.period)
	errs := rn.s.claimer.Renew(rctx, leases)
	cancel()
	ok := true
	for i, err := range errs {
		l := leases[i]
		switch {
		case err == nil:
			rn.mu.Lock()
			hs[i].renewals++
			n := hs[i].renewals
			rn.mu.Unlock()
			rn.s.tel.renewal("renewed")
			hs[i].trace.renewed(l, n)
		case errors.Is(err, slot.ErrLeaseLost) && !errors.Is(err, slot.ErrDataLoss) && !rn.has(l) &&
			!errors.Is(context.Cause(l.Context()), slot.ErrLeaseLost):
			// The run returned while this renewal was in flight, and was
			// finished before it ran (its lease ended released): no loss.
			// (A loss it had not seen yet, its finish finds.) The lease's
			// cause decides, not only whether the run is still here: the
			// store ends the lease as lost before Renew returns, and the run,
			// woken by that, may leave before this line.
		case errors.Is(err, slot.ErrLeaseLost):
			rn.remove(l) // the run records the loss itself
			rn.s.tel.renewal("lost")
			if errors.Is(err, slot.ErrDataLoss) {
				rn.s.runDataLoss(l, "a running slot's record is gone, or another run's took its place", "slotcron.job", l.Job(),
					"slotcron.slot", l.Slot().UTC().Format(time.RFC3339), "error", err)
			}
		default:
			ok = false
			rn.s.tel.renewal("failed")
			hs[i].trace.renewFailed(err)
			rn.s.log.Warn("lease renewal failed; retrying until its TTL would run out", "slotcron.job", l.Job(),
				"slotcron.slot", l.Slot().UTC().Format(time.RFC3339), "error", err, "valid_until", l.Deadline().Format(time.RFC3339Nano))
		}
	}
	return ok
}

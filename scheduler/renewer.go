package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/locking"
)

// renewer renews every lease the replica holds in one round trip per period.
// Renewals run on the machine's clock whatever Clock the scheduler has: lease
// TTLs run in Redis, in real time.
type renewer struct {
	s      *Scheduler
	period time.Duration

	mu     sync.Mutex
	leases map[*locking.SlotLease]*held
}

// held is a lease being renewed: the run span's context gets its events.
type held struct {
	ctx      context.Context
	renewals int
}

func newRenewer(s *Scheduler) *renewer {
	period := s.cfg.renewEvery
	if period == 0 {
		for _, j := range s.jobs {
			if p := j.LeaseTTL / 3; period == 0 || p < period {
				period = p
			}
		}
	}
	return &renewer{s: s, period: period, leases: map[*locking.SlotLease]*held{}}
}

func (rn *renewer) add(l *locking.SlotLease, runCtx context.Context) {
	rn.mu.Lock()
	rn.leases[l] = &held{ctx: runCtx}
	rn.mu.Unlock()
}

func (rn *renewer) remove(l *locking.SlotLease) {
	rn.mu.Lock()
	delete(rn.leases, l)
	rn.mu.Unlock()
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
	leases := make([]*locking.SlotLease, 0, len(rn.leases))
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
			rn.s.tel.renewed(hs[i].ctx, l, n)
		case errors.Is(err, locking.ErrLeaseLost):
			rn.remove(l) // the run records the loss itself
			rn.s.tel.renewal("lost")
		default:
			ok = false
			rn.s.tel.renewal("failed")
			trace.SpanFromContext(hs[i].ctx).AddEvent("lease.renew_failed", trace.WithAttributes(attribute.String("error", err.Error())))
			rn.s.log.Warn("lease renewal failed; retrying until its TTL would run out", "slotcron.job", l.Job(),
				"slotcron.slot", l.Slot().UTC().Format(time.RFC3339), "error", err, "valid_until", l.Deadline().Format(time.RFC3339Nano))
		}
	}
	return ok
}

package locking

import (
	"context"
	"fmt"
	"time"
)

// SlotLease is a won slot: the run's token, fence and attempt, and the proof
// of ownership that Slots.Renew keeps alive. Like a Lease, it can be lost at
// any moment; its Context is cancelled, with a cause wrapping ErrLeaseLost, as
// soon as ownership can no longer be proven.
type SlotLease struct {
	s         *Slots
	job       string
	slot      time.Time
	replica   string
	token     string
	fence     int64
	attempt   int
	ttl       time.Duration
	retention time.Duration
	record    string
	lease     string
	v         *validity
}

func (s *Slots) newSlotLease(ctx context.Context, c SlotClaim, token string, fence int64, attempt int, sent time.Time) *SlotLease {
	slot := c.Slot.Unix()
	return &SlotLease{
		s: s, job: c.Job, slot: time.Unix(slot, 0).In(c.Slot.Location()), replica: c.Replica,
		token: token, fence: fence, attempt: attempt, ttl: c.LeaseTTL, retention: c.Retention,
		record: s.recordKey(c.Job, slot), lease: s.leaseKey(c.Job, slot, c.AllowOverlap),
		v: newValidity(ctx, sent, c.LeaseTTL),
	}
}

// Job returns the job's name.
func (l *SlotLease) Job() string { return l.job }

// Slot returns the slot's scheduled time.
func (l *SlotLease) Slot() time.Time { return l.slot }

// Replica returns the ID of the replica that won the slot.
func (l *SlotLease) Replica() string { return l.replica }

// Token returns the run's token.
func (l *SlotLease) Token() string { return l.token }

// Fence returns the run's fencing token, which grows with every claim of the job.
func (l *SlotLease) Fence() int64 { return l.fence }

// Attempt returns the attempt number, from 1.
func (l *SlotLease) Attempt() int { return l.attempt }

// TTL returns the lease TTL that renewals restore.
func (l *SlotLease) TTL() time.Duration { return l.ttl }

// Done is closed when the lease ends: finished, or lost.
func (l *SlotLease) Done() <-chan struct{} { return l.v.ctx.Done() }

// Context is cancelled when the lease ends; after a loss its cause wraps ErrLeaseLost.
func (l *SlotLease) Context() context.Context { return l.v.ctx }

// Deadline returns the local time until which ownership is proven.
func (l *SlotLease) Deadline() time.Time { return l.v.deadline() }

// Renew renews every lease in one pipeline: one round trip however many
// leases a replica holds. It returns one error per lease, in order: nil when
// renewed; an error wrapping ErrLeaseLost when the lease no longer holds its
// token (the lease has ended); any other error when Redis did not answer (the
// lease stays valid until its TTL would have run out).
func (s *Slots) Renew(ctx context.Context, leases []*SlotLease) []error {
	errs := make([]error, len(leases))
	if len(leases) == 0 {
		return errs
	}
	calls := make([]call, len(leases))
	for i, l := range leases {
		calls[i] = call{slotRenewScript, []string{l.lease, l.record}, []any{l.token, l.ttl.Milliseconds(), l.retention.Milliseconds()}}
	}
	sent := time.Now()
	for i, cmd := range s.batch(ctx, calls) {
		l := leases[i]
		n, err := cmd.Int64()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("locking: renew %s@%d: %w", l.job, l.slot.Unix(), err)
			l.v.failed(errs[i])
		case n == 1:
			l.v.extend(sent, l.ttl)
		default:
			errs[i] = lostTo("the job's lease no longer holds this run's token")
			l.v.end(errs[i])
		}
	}
	return errs
}

// FinishRequest is how one run ended.
type FinishRequest struct {
	Lease *SlotLease
	State SlotState // StateDone, StateFailed or StateAbandoned
	Error string    // the error text, "" for none
}

// Finish records the final state of runs and frees their leases, in one
// round trip (on a single server, one script call). Each record stays for
// its retention. It returns one error per request, in order: nil when
// recorded (the SlotLease has ended); an error wrapping ErrNotHeld when the
// record is no longer that run's (taken over, or recorded abandoned by another
// replica), and nothing was written; any other error when Redis did not
// answer. Run it on a context that outlives a shutdown.
func (s *Slots) Finish(ctx context.Context, reqs []FinishRequest) []error {
	errs := make([]error, len(reqs))
	var valid []int // the requests with a final state
	for i, r := range reqs {
		switch r.State {
		case StateDone, StateFailed, StateAbandoned:
			valid = append(valid, i)
		default:
			errs[i] = fmt.Errorf("locking: Finish %s@%d: %q is not a final state of a run", r.Lease.job, r.Lease.slot.Unix(), r.State)
		}
	}
	groups := s.split(len(valid), func(k int) (callKind, string) { return callKind{}, reqs[valid[k]].Lease.job })
	for _, g := range groups {
		for k := range g {
			g[k] = valid[g[k]] // request indexes
		}
	}
	calls := make([]call, len(groups))
	for gi, g := range groups {
		c := call{script: slotFinishScript, args: []any{s.maxHistory}}
		for _, i := range g {
			l := reqs[i].Lease
			c.keys = append(c.keys, l.record, l.lease, s.runsKey(l.job))
			c.args = append(c.args, l.token, string(reqs[i].State), reqs[i].Error, l.retention.Milliseconds(), l.replica)
		}
		calls[gi] = c
	}
	for gi, cmd := range s.batch(ctx, calls) {
		g := groups[gi]
		vals, err := replies(cmd, len(g))
		for k, i := range g {
			l := reqs[i].Lease
			if err != nil {
				errs[i] = fmt.Errorf("locking: Finish %s@%d: %w", l.job, l.slot.Unix(), err)
				continue
			}
			v, _ := vals[k].([]any)
			r := reply(v)
			if r.int(0) == 1 {
				l.v.end(nil)
				continue
			}
			now := r.str(1)
			l.v.end(lostTo("the slot record is no longer this run's: it is " + now))
			errs[i] = fmt.Errorf("%w: %s@%d is %s", ErrNotHeld, l.job, l.slot.Unix(), now)
		}
	}
	return errs
}

package slotstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slotcron/slotcron/internal/validity"
	"github.com/slotcron/slotcron/slot"
)

// lease is a won slot: the slot.Lease this Store hands out. Besides the
// run's token it keeps what its record holds, so that the finish writes the
// final record whole (see runFinal).
type lease struct {
	s         *Store
	job       string
	slot      time.Time
	ref       string // the slot as the scripts name it
	replica   string
	token     string
	runID     string
	fence     int64
	attempt   int
	started   int64 // ms on Redis's clock, as the record has it
	at        int64 // a manual slot's: when it was asked for, ms; 0 otherwise
	by, note  string
	manualID  string // a manual slot's ID; "" for a scheduled slot
	allow     bool   // the lease is the slot's own (overlap allow), not the job's
	ttl       time.Duration
	retention time.Duration
	record    string
	state     string
	v         *validity.Timer
}

// won is what a won claim's reply says of the record, beyond fence and attempt.
type won struct {
	runID       string
	started, at int64
	by, note    string
}

func (s *Store) newLease(ctx context.Context, c slot.Claim, token string, fence int64, attempt int, w won, sent time.Time) *lease {
	ref, record := s.target(c)
	at, manualID := time.Unix(c.Slot.Unix(), 0), ""
	if c.Manual != nil { // every attempt of a manual slot is at its record's time
		manualID = c.Manual.ID
		if w.at != 0 {
			at = time.UnixMilli(w.at)
		}
	}
	return &lease{
		s: s, job: c.Job, slot: at.In(c.Slot.Location()), ref: ref, replica: c.Replica, manualID: manualID,
		token: token, runID: w.runID, fence: fence, attempt: attempt, started: w.started, at: w.at, by: w.by, note: w.note,
		allow: c.AllowOverlap, ttl: c.LeaseTTL, retention: c.Retention,
		record: record, state: s.stateKey(c.Job),
		v: validity.Start(ctx, sent, c.LeaseTTL),
	}
}

// kind names the lease in the record: the job's, or the slot's own.
func (l *lease) kind() string {
	if l.allow {
		return "slot"
	}
	return "job"
}

func (l *lease) Job() string              { return l.job }
func (l *lease) Slot() time.Time          { return l.slot }
func (l *lease) Replica() string          { return l.replica }
func (l *lease) Token() string            { return l.token }
func (l *lease) RunID() string            { return l.runID }
func (l *lease) Fence() int64             { return l.fence }
func (l *lease) Attempt() int             { return l.attempt }
func (l *lease) TTL() time.Duration       { return l.ttl }
func (l *lease) Context() context.Context { return l.v.Context() }
func (l *lease) Deadline() time.Time      { return l.v.Deadline() }
func (l *lease) Proven() bool             { return l.v.Proven() }

func (l *lease) Manual() *slot.Manual {
	if l.manualID == "" {
		return nil
	}
	return &slot.Manual{ID: l.manualID, By: l.by, Note: l.note}
}

// own returns l as a lease of this store.
func (s *Store) own(l slot.Lease) (*lease, error) {
	if ml, ok := l.(*lease); ok && ml.s == s {
		return ml, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrForeignLease, l)
}

// Renew renews every lease in one pipeline: one round trip however many
// leases a replica holds. It returns one error per lease, in order: nil when
// renewed; an error wrapping slot.ErrLeaseLost when the run no longer owns its
// slot (the lease has ended): its lease holds another token, or its record
// was taken over or abandoned, or its record is gone (then it wraps
// slot.ErrDataLoss too); ErrForeignLease for a lease this Store did not make;
// any other error when Redis did not answer (the lease stays valid until its
// TTL would have run out).
func (s *Store) Renew(ctx context.Context, leases []slot.Lease) []error {
	errs := make([]error, len(leases))
	var (
		calls []call
		mine  []*lease
		index []int
	)
	for i, l := range leases {
		ml, err := s.own(l)
		if err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, call{renewScript, []string{ml.state, ml.record},
			[]any{ml.token, ml.ref, ml.kind(), ml.ttl.Milliseconds(), ml.retention.Milliseconds(), ml.replica, ml.attempt, ml.runID}})
		mine, index = append(mine, ml), append(index, i)
	}
	if len(calls) == 0 {
		return errs
	}
	sent := time.Now()
	for k, cmd := range s.batch(ctx, calls) {
		l, i := mine[k], index[k]
		n, err := cmd.Int64()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("slotstore: renew %s@%d: %w", l.job, l.slot.Unix(), err)
			l.v.Failed(errs[i])
		case n == 1:
			l.v.Extend(sent, l.ttl)
		case n == -1:
			errs[i] = validity.LostTo("the slot was taken over or abandoned: its record is no longer this run's")
			l.v.End(errs[i])
		case n == -2:
			errs[i] = fmt.Errorf("%w: %w: the slot's record or the job's state is gone, or the record is another run's, written after this run's was lost",
				validity.ErrLeaseLost, slot.ErrDataLoss)
			l.v.End(errs[i])
		default:
			errs[i] = validity.LostTo("the job's lease no longer holds this run's token")
			l.v.End(errs[i])
		}
	}
	return errs
}

// Finish records the final state of runs and frees their leases, in one
// round trip (on a single server, one script call). Each record stays for
// its retention. It returns one error per request, in order: nil when
// recorded (the lease has ended); an error wrapping slot.ErrNotHeld when the
// record is no longer that run's (taken over, or recorded abandoned by
// another replica, or gone: then it wraps slot.ErrDataLoss too), and nothing
// was written; any other error when Redis did not answer. An error that
// wraps slot.ErrLeaseLost says that the lease was lost in Redis while this
// replica still held it on its own clock (Redis held it lapsed, or another
// run's): with slot.ErrNotHeld, nothing was written; without, the record
// holds the final state all the same. Run it on a context
// that outlives a shutdown.
func (s *Store) Finish(ctx context.Context, reqs []slot.FinishRequest) []error {
	errs := make([]error, len(reqs))
	leases := make([]*lease, len(reqs))
	var valid []int // the requests with a final state
	for i, r := range reqs {
		l, err := s.own(r.Lease)
		if err != nil {
			errs[i] = err
			continue
		}
		leases[i] = l
		switch r.State {
		case slot.StateDone, slot.StateFailed, slot.StateAbandoned:
			valid = append(valid, i)
		default:
			errs[i] = fmt.Errorf("slotstore: Finish %s@%d: %q is not a final state of a run", l.job, l.slot.Unix(), r.State)
		}
	}
	groups := s.split(len(valid), func(k int) (callKind, string) { return callKind{}, leases[valid[k]].job })
	for _, g := range groups {
		for k := range g {
			g[k] = valid[g[k]] // request indexes
		}
	}
	calls := make([]call, len(groups))
	for gi, g := range groups {
		c := call{script: finishScript, keys: make([]string, 0, 3*len(g)), args: make([]any, 0, 8*len(g))}
		for _, i := range g {
			l := leases[i]
			head, tail := l.runFinal(reqs[i].State, reqs[i].Error, reqs[i].Result)
			c.keys = append(c.keys, l.record, l.state, s.ringKey(l.job))
			c.args = append(c.args, l.token, l.ref, l.kind(), head, tail, l.retention.Milliseconds(), l.attempt, l.runID)
		}
		calls[gi] = c
	}
	cmds, acked := s.batchWait(ctx, calls, s.waitReplicas, s.waitTimeout)
	for gi, cmd := range cmds {
		g := groups[gi]
		vals, err := replies(cmd, len(g))
		for k, i := range g {
			l := leases[i]
			if err != nil {
				errs[i] = fmt.Errorf("slotstore: Finish %s@%d: %w", l.job, l.slot.Unix(), err)
				continue
			}
			v, _ := vals[k].([]any)
			r := reply(v)
			// Whether the lease's time had yet to run out on this
			// replica's clock as Redis answered: then a lease Redis held
			// lapsed, or another run's, was lost there unseen, or seen
			// only by a renewal that answered as the run returned.
			held := time.Now().Before(l.v.Deadline())
			if r.int(0) == 1 {
				l.v.End(nil)
				var unrepl error
				if s.waitReplicas > 0 && acked < s.waitReplicas {
					unrepl = fmt.Errorf("%w: %s@%d is recorded %s, but %d of %d replicas acknowledged it within %v",
						slot.ErrUnreplicated, l.job, l.slot.Unix(), reqs[i].State, acked, s.waitReplicas, s.waitTimeout)
					errs[i] = unrepl
				}
				if held && len(v) > 1 && r.str(1) == "lapsed" {
					errs[i] = errors.Join(fmt.Errorf("%w: %s@%d is recorded %s, but Redis held its lease lapsed, or another run's, "+
						"while this replica held it (a failover that lost renewals, or Redis's clock stepped): another run of the job may have started meanwhile",
						slot.ErrLeaseLost, l.job, l.slot.Unix(), reqs[i].State), unrepl)
				}
				if len(v) > 1 && r.str(1) == "gone" {
					// The record written anew may be lost again by a
					// failover: both are said.
					errs[i] = fmt.Errorf("%w: %s@%d: the slot's record was gone, though the run held the job's lease; it is recorded %s anew",
						slot.ErrDataLoss, l.job, l.slot.Unix(), reqs[i].State)
					if unrepl != nil {
						errs[i] = errors.Join(errs[i], unrepl)
					}
				}
				continue
			}
			now := r.str(1)
			l.v.End(validity.LostTo("the slot record is no longer this run's: it is " + now))
			errs[i] = fmt.Errorf("%w: %s@%d is %s", slot.ErrNotHeld, l.job, l.slot.Unix(), now)
			switch {
			case now == "gone":
				errs[i] = fmt.Errorf("%w: %w: %s@%d: the slot's record is gone", slot.ErrNotHeld, slot.ErrDataLoss, l.job, l.slot.Unix())
			case len(v) > 2 && r.str(2) == "replaced":
				errs[i] = fmt.Errorf("%w: %w: %s@%d: the slot's record is another run's (%s), written after this run's was lost",
					slot.ErrNotHeld, slot.ErrDataLoss, l.job, l.slot.Unix(), now)
			case held:
				// Taken over, or recorded abandoned, on a lease that Redis
				// held lapsed while this replica held it.
				errs[i] = fmt.Errorf("%w: %w: %s@%d is %s, though this replica held its lease (a failover that lost renewals, or Redis's clock stepped)",
					slot.ErrNotHeld, slot.ErrLeaseLost, l.job, l.slot.Unix(), now)
			}
		}
	}
	return errs
}

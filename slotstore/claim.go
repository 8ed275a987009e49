package slotstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/slot"
)

// Claim sends every claim in one pipeline: one round trip for all the jobs due
// at an instant, however many. On a single server the claims share one script
// call, on a Cluster one call per hash slot. It returns one result per claim,
// in order; a claim that failed on its own has Err set. The error is non-nil
// only for invalid claims, and then nothing was sent.
func (s *Store) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	for i, c := range claims {
		if err := checkJob(c.Job); err != nil {
			return nil, fmt.Errorf("slotstore: Claim %d: %w", i, err)
		}
		if c.Kind < slot.ClaimLive || c.Kind > slot.ClaimManual {
			return nil, fmt.Errorf("slotstore: Claim %d (%s): unknown kind %s", i, c.Job, c.Kind)
		}
		if (c.Kind != slot.ClaimMiss && c.Kind != slot.ClaimExpire && c.LeaseTTL < slot.MinLeaseTTL) || c.Retention <= 0 {
			return nil, fmt.Errorf("slotstore: Claim %d (%s): lease TTL must be >= %v and retention > 0", i, c.Job, slot.MinLeaseTTL)
		}
		if err := checkManual(c); err != nil {
			return nil, fmt.Errorf("slotstore: Claim %d (%s): %w", i, c.Job, err)
		}
		if err := checkOverMissed(c); err != nil {
			return nil, fmt.Errorf("slotstore: Claim %d (%s): %w", i, c.Job, err)
		}
	}
	tokens, runIDs := make([]string, len(claims)), make([]string, len(claims))
	var (
		calls  []call
		groups [][]int // the claims each call answers
	)
	for _, g := range s.group(claims) {
		if claims[g[0]].Kind == slot.ClaimTakeover {
			calls = append(calls, s.takeoverCall(claims, tokens, runIDs, g))
		} else {
			calls = append(calls, s.claimCall(claims, tokens, runIDs, g))
		}
		groups = append(groups, g)
	}
	sent := time.Now()
	results := make([]slot.Result, len(claims))
	cmds, acked := s.batchWait(ctx, calls, s.waitReplicas, s.waitTimeout)
	for gi, cmd := range cmds {
		g := groups[gi]
		vals, err := replies(cmd, len(g))
		for k, i := range g {
			var v []any
			if err == nil {
				v, _ = vals[k].([]any)
			}
			results[i] = s.parseClaim(ctx, claims[i], tokens[i], runIDs[i], sent, v, err)
			results[i].Unreplicated = s.waitReplicas > 0 && acked < s.waitReplicas && results[i].Outcome == slot.OutcomeWon
		}
	}
	return results, nil
}

// group splits claims for split: claims and takeovers apart (two scripts),
// one replica per call.
func (s *Store) group(claims []slot.Claim) [][]int {
	return s.split(len(claims), func(i int) (callKind, string) {
		c := claims[i]
		return callKind{takeover: c.Kind == slot.ClaimTakeover, replica: c.Replica}, c.Job
	})
}

// checkManual checks that a claim is manual exactly when its kind says so
// (a takeover or an expire claim may be either), and the manual slot's ID,
// note and who asked.
func checkManual(c slot.Claim) error {
	switch {
	case c.Kind == slot.ClaimManual && c.Manual == nil:
		return errors.New("a manual claim needs Manual")
	case c.Manual == nil:
		return nil
	case c.Kind != slot.ClaimManual && c.Kind != slot.ClaimTakeover && c.Kind != slot.ClaimExpire:
		return fmt.Errorf("a %s claim cannot be for a manual slot", c.Kind)
	}
	if err := errors.Join(slot.CheckNote("the note", c.Manual.Note), slot.CheckNote("by", c.Manual.By)); err != nil {
		return err
	}
	return slot.CheckManualID(c.Manual.ID)
}

// checkOverMissed checks that only a backfill's claim wins over a missed
// record: a catch-up claim of a scheduled slot, with the MaxEarly that
// bounds it within the retention (past it, a run's record may have expired
// before the slot was recorded missed).
func checkOverMissed(c slot.Claim) error {
	switch {
	case !c.OverMissed:
		return nil
	case c.Kind != slot.ClaimCatchup:
		return fmt.Errorf("a %s claim cannot be OverMissed: only a catch-up claim (a backfill's) can", c.Kind)
	case c.MaxEarly <= 0:
		return errors.New("an OverMissed claim needs a MaxEarly: past the retention less it, a missed record no longer proves that the slot never ran")
	case c.Manual != nil:
		return errors.New("an OverMissed claim cannot be for a manual slot")
	}
	return nil
}

// claimModes are claim.lua's ARGV mode for each kind of claim.
var claimModes = [...]string{slot.ClaimLive: "live", slot.ClaimCatchup: "wait", slot.ClaimMiss: "miss", slot.ClaimExpire: "expire", slot.ClaimManual: "manual"}

// claimProfile is what claims of one job share in claim.lua's arguments:
// sent once per call, not once per claim.
type claimProfile struct {
	ttl, retention int64
	overlap, mode  string
	reason         string
	early          int64
	by, note       string // a manual slot's
	peek           bool   // read the record first (Claim.Contested)
	overMissed     bool   // win over a missed record (Claim.OverMissed)
}

// claimCall is one claim.lua call for the claims at indexes g. It sets
// their tokens: the claim's own, or the call's random base, a dot and the
// claim's position; and their run IDs.
func (s *Store) claimCall(claims []slot.Claim, tokens, runIDs []string, g []int) call {
	var base string
	index := map[claimProfile]int{}
	var profiles []any
	perClaim := make([]any, 0, 5*len(g))
	keys := make([]string, 0, 3*len(g))
	for k, i := range g {
		c := claims[i]
		ref, record := s.target(c)
		keys = append(keys, record, s.stateKey(c.Job), s.ringKey(c.Job))
		p := claimProfile{ttl: c.LeaseTTL.Milliseconds(), retention: c.Retention.Milliseconds(),
			overlap: "skip", mode: claimModes[c.Kind], reason: c.Reason, early: c.MaxEarly.Milliseconds(), peek: c.Contested,
			overMissed: c.OverMissed}
		if c.Manual != nil {
			p.by, p.note = c.Manual.By, c.Manual.Note
		}
		kind := "job"
		if c.AllowOverlap {
			p.overlap, kind = "allow", "slot"
		}
		if c.Kind == slot.ClaimLive && c.Ahead {
			p.mode = "ahead"
		}
		if c.Kind == slot.ClaimMiss && !c.Deadline.IsZero() { // not before its deadline: claim.lua's expire
			p.mode = "expire"
		}
		if p.reason == "" {
			p.reason = "misfire"
		}
		pi, ok := index[p]
		if !ok {
			pi = len(index) + 1
			index[p] = pi
			profiles = append(profiles, p.ttl, p.retention, p.overlap, p.mode, p.reason, p.early, p.by, p.note, p.peek, p.overMissed)
		}
		tokens[i] = c.Token
		if tokens[i] == "" {
			if base == "" {
				base = rediskit.NewToken()
			}
			tokens[i] = base + "." + strconv.Itoa(k+1)
		}
		var tail string
		if c.Kind != slot.ClaimMiss && c.Kind != slot.ClaimExpire { // no run comes of those
			runIDs[i] = runID(c)
			tail = claimTail(kind, tokens[i], runIDs[i], ref, c.Replica, p.by, p.note)
		}
		perClaim = append(perClaim, ref, c.Deadline.UnixMilli(), pi, tokens[i], tail)
	}
	args := make([]any, 0, 2+len(profiles)+len(perClaim))
	args = append(args, claims[g[0]].Replica, len(index))
	args = append(append(args, profiles...), perClaim...)
	return call{claimScript, keys, args}
}

// takeoverCall is one takeover.lua call for the takeovers at indexes g. It
// sets their tokens and run IDs.
func (s *Store) takeoverCall(claims []slot.Claim, tokens, runIDs []string, g []int) call {
	keys := make([]string, 0, 3*len(g))
	args := make([]any, 0, 1+7*len(g))
	args = append(args, claims[g[0]].Replica)
	for _, i := range g {
		c := claims[i]
		tokens[i] = c.Token
		if tokens[i] == "" {
			tokens[i] = rediskit.NewToken()
		}
		ref, record := s.target(c)
		keys = append(keys, record, s.stateKey(c.Job), s.ringKey(c.Job))
		policy := "abandon"
		if c.Retry {
			policy = "retry"
		}
		runIDs[i] = runID(c)
		args = append(args, tokens[i], ref, c.LeaseTTL.Milliseconds(), c.Retention.Milliseconds(), policy, c.MaxAttempts, runIDs[i])
	}
	return call{takeoverScript, keys, args}
}

// runID is the claim's run ID, or a new UUIDv7.
func runID(c slot.Claim) string {
	if c.RunID != "" {
		return c.RunID
	}
	return uuid.Must(uuid.NewV7()).String()
}

func (s *Store) parseClaim(ctx context.Context, c slot.Claim, token, runID string, sent time.Time, vals []any, err error) slot.Result {
	if err == nil && len(vals) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		return slot.Result{Err: fmt.Errorf("slotstore: claim %s@%d: %w", c.Job, c.Slot.Unix(), err), Wait: -1}
	}
	r := reply(vals)
	res := slot.Result{Outcome: slot.Outcome(r.str(0)), Wait: -1}
	switch res.Outcome {
	case slot.OutcomeWon:
		res.Fence, res.Attempt = r.int(1), int(r.int(2))
		res.Holder = c.Replica
		w := won{runID: runID}
		if c.Kind == slot.ClaimTakeover { // the attempt holds the lease the record names
			c.AllowOverlap = r.str(3) == "slot"
			w.started, w.at = r.int(5), r.int(6)
			w.by, w.note = r.str(7), r.str(8)
			if id := r.str(4); id != "" {
				w.runID = id
			}
		} else {
			w.started = r.int(4)
			if id := r.str(3); id != "" { // the record's, for a claim sent again
				w.runID = id
			}
			if c.Manual != nil { // asked for when first claimed
				w.at, w.by, w.note = w.started, c.Manual.By, c.Manual.Note
			} else if len(vals) >= 7 { // won over a missed record: the run's record keeps it
				w.by, w.note = r.str(5), r.str(6)
			}
		}
		res.Lease = s.newLease(ctx, c, token, res.Fence, res.Attempt, w, sent)
	case slot.OutcomeLost:
		res.Holder, res.State = r.str(1), slot.State(r.str(2))
		res.Fence, res.Attempt = r.int(3), int(r.int(4))
	case slot.OutcomeSkipped:
		res.Holder, res.Wait = r.str(1), r.ms(3)
		r.holderSlot(2, &res)
	case slot.OutcomeBusy:
		res.Holder, res.Wait = r.str(1), r.ms(2)
		r.holderSlot(3, &res)
	case slot.OutcomeMissed:
		res.Late = time.Duration(r.int(1)) * time.Millisecond
	case slot.OutcomeEarly:
		res.Wait = r.ms(1)
	case slot.OutcomePaused:
		res.Reason = r.str(1)
	case "old":
		res.Outcome = ""
		late, kept := time.Duration(r.int(1))*time.Millisecond, time.Duration(r.int(2))*time.Millisecond
		if kept >= c.Retention {
			res.Err = fmt.Errorf("slotstore: claim %s@%d: %w: %v after the slot on Redis's clock, and its retention (%v) less the claim's MaxEarly (%v) is %v",
				c.Job, c.Slot.Unix(), slot.ErrPastRetention, late, c.Retention, c.MaxEarly, c.Retention-c.MaxEarly)
			break
		}
		res.Kept = kept
		res.Err = fmt.Errorf("slotstore: claim %s@%d: %w: %v after the slot on Redis's clock, and the job's records were written lately with a retention of %v, shorter than this claim's (%v): "+
			"a record of the slot may have been kept only that long (a retention raised since, or a replica of another config); less the claim's MaxEarly (%v), it is %v",
			c.Job, c.Slot.Unix(), slot.ErrPastRetention, late, kept, c.Retention, c.MaxEarly, kept-c.MaxEarly)
	case slot.OutcomeAlive:
		res.Wait = r.ms(1)
	case slot.OutcomeAbandoned:
		res.Holder, res.Attempt, res.Fence = r.str(1), int(r.int(2)), r.int(3)
		if at := r.int(4); at != 0 && c.Manual != nil {
			res.Slot = time.UnixMilli(at)
		}
	case slot.OutcomeClosed:
		res.State, res.Holder = slot.State(r.str(1)), r.str(2)
	case slot.OutcomeGone:
	default:
		res.Err = fmt.Errorf("slotstore: claim %s@%d: unexpected reply %v", c.Job, c.Slot.Unix(), vals)
	}
	if r.err != nil && res.Err == nil {
		res.Err = fmt.Errorf("slotstore: claim %s@%d: %w in reply %v", c.Job, c.Slot.Unix(), r.err, vals)
	}
	return res
}

package locking

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotClient is what the slot protocol needs from go-redis: scripts, pipelines
// (claims and renewals are batched) and TIME. Every redis.UniversalClient
// satisfies it.
type SlotClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Time(ctx context.Context) *redis.TimeCmd
}

// Slots is the slot protocol of the scheduler. Each job has, under one hash
// tag, so that every script touches one cluster slot:
//
//	<prefix>:{<job>}:slot:<unix>   the slot record (hash), kept for the retention
//	<prefix>:{<job>}:lease         the job's lease (string: "<token> <slot> <replica>")
//	<prefix>:{<job>}:lease:<unix>  a slot's own lease, when overlap is allowed
//	<prefix>:{<job>}:fence         the fencing-token counter
//	<prefix>:{<job>}:runs          the run history (stream, capped)
//	<prefix>:{<job>}:last          the latest slot that has a record (a sorted set)
//
// A slot starts at most once: the claim script writes its record, and no
// finish ever deletes it. All times that decide anything (deadlines, record
// stamps) are Redis's, from TIME inside the scripts.
type Slots struct {
	rdb        SlotClient
	prefix     string
	maxHistory int
	topology   topology
}

// topology says which claims may share one script call: a script may only
// touch keys that live together.
type topology int

const (
	topoSingle   topology = iota // one server (or Sentinel): one call for all claims
	topoCluster                  // Redis Cluster: one call per hash slot
	topoSeparate                 // an unknown client (Ring, a wrapper): one call per claim
)

// historyLen is the approximate length of each job's run history.
const historyLen = 1000

// NewSlots returns the slot protocol on rdb with keys under prefix. It sends
// nothing. The prefix must be non-empty and free of '{' and '}'.
func NewSlots(rdb SlotClient, prefix string) (*Slots, error) {
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("locking: NewSlots: prefix %q must be non-empty and free of '{' and '}'", prefix)
	}
	t := topoSeparate
	switch rdb.(type) {
	case *redis.Client:
		t = topoSingle
	case *redis.ClusterClient:
		t = topoCluster
	}
	return &Slots{rdb: rdb, prefix: prefix, maxHistory: historyLen, topology: t}, nil
}

// Prefix returns the key prefix.
func (s *Slots) Prefix() string { return s.prefix }

// SlotState is the state in a slot record.
type SlotState string

// The states of a slot record. A record is "running" until its run finishes;
// the others are final.
const (
	StateRunning   SlotState = "running"
	StateDone      SlotState = "done"
	StateFailed    SlotState = "failed"
	StateAbandoned SlotState = "abandoned"
	StateMissed    SlotState = "missed"
	StateSkipped   SlotState = "skipped"
)

// ClaimKind says what a SlotClaim asks.
type ClaimKind int

const (
	// ClaimLive claims a slot at its time: past Deadline it is recorded
	// missed; while a run of the job holds the lease (overlap skip) it is
	// recorded skipped.
	ClaimLive ClaimKind = iota
	// ClaimCatchup claims a slot that all replicas missed: no deadline, and
	// a run in progress answers OutcomeBusy instead of recording skipped.
	ClaimCatchup
	// ClaimMiss records the slot missed, with Reason, unless it has a record.
	ClaimMiss
	// ClaimTakeover settles a running slot whose owner may be gone: it
	// answers OutcomeAlive while the owner holds its lease; otherwise it
	// takes the slot over as the next attempt (Retry, below MaxAttempts) or
	// records it abandoned.
	ClaimTakeover
)

// SlotClaim is one request of a Claim batch.
type SlotClaim struct {
	Kind         ClaimKind
	Job          string
	Slot         time.Time
	Replica      string
	LeaseTTL     time.Duration
	Retention    time.Duration
	AllowOverlap bool      // false: a run of the job in progress blocks the slot
	Deadline     time.Time // ClaimLive: the latest start, on Redis's clock
	Reason       string    // ClaimLive and ClaimMiss: why a missed slot was missed
	Retry        bool      // ClaimTakeover: on_owner_lost is retry
	MaxAttempts  int       // ClaimTakeover: the attempt limit
}

// Outcome is the answer to one SlotClaim.
type Outcome string

// The outcomes of claims. Losing a race is an outcome, not an error.
const (
	OutcomeWon       Outcome = "won"       // this replica runs the slot: Lease is set
	OutcomeLost      Outcome = "lost"      // the slot has a record: Holder, State (Wait is -1)
	OutcomeSkipped   Outcome = "skipped"   // recorded skipped: Holder's run holds the job
	OutcomeBusy      Outcome = "busy"      // a run holds the job; try again after Wait
	OutcomeMissed    Outcome = "missed"    // recorded missed: Late says how late
	OutcomeAlive     Outcome = "alive"     // takeover: the owner holds its lease for Wait
	OutcomeAbandoned Outcome = "abandoned" // takeover: recorded abandoned
	OutcomeClosed    Outcome = "closed"    // takeover: no longer running (State)
	OutcomeGone      Outcome = "gone"      // takeover: the record has expired
)

// ClaimResult is the answer to one SlotClaim.
type ClaimResult struct {
	Outcome Outcome
	Lease   *SlotLease // OutcomeWon
	Holder  string     // the record's owner, or the replica whose run holds the lease
	// HolderSlot is the slot of the run that holds the job's lease
	// (OutcomeSkipped, OutcomeBusy): the one to watch in case its owner dies.
	HolderSlot time.Time
	State      SlotState     // OutcomeLost, OutcomeClosed
	Fence      int64         // OutcomeWon, OutcomeLost
	Attempt    int           // OutcomeWon, OutcomeLost, OutcomeAbandoned
	Wait       time.Duration // the holder's remaining lease, or -1 when none or unknown
	Late       time.Duration // OutcomeMissed
	Err        error         // this claim failed; the others may have succeeded
}

// The keys of a job, each built in one allocation: Key(prefix, job) + suffix.
func (s *Slots) jobKey(job, suffix string) string { return s.prefix + ":{" + job + "}:" + suffix }

func (s *Slots) slotKey(job, kind string, slot int64) string {
	var n [20]byte
	return s.prefix + ":{" + job + "}:" + kind + string(strconv.AppendInt(n[:0], slot, 10))
}

func (s *Slots) recordKey(job string, slot int64) string { return s.slotKey(job, "slot:", slot) }

func (s *Slots) leaseKey(job string, slot int64, allowOverlap bool) string {
	if allowOverlap {
		return s.slotKey(job, "lease:", slot)
	}
	return s.jobKey(job, "lease")
}

func (s *Slots) fenceKey(job string) string { return s.jobKey(job, "fence") }
func (s *Slots) runsKey(job string) string  { return s.jobKey(job, "runs") }
func (s *Slots) lastKey(job string) string  { return s.jobKey(job, "last") }

func checkJob(job string) error {
	if job == "" || strings.ContainsAny(job, "{}") {
		return fmt.Errorf("%w: job name %q must be non-empty and free of '{' and '}'", ErrInvalidKey, job)
	}
	return nil
}

// Prepare loads the slot scripts into the server's script cache, so that the
// first batch of claims takes one round trip too. One round trip (one per
// master on a cluster). Claim works without it: it falls back to EVAL.
func (s *Slots) Prepare(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	for _, src := range slotScriptSources {
		pipe.ScriptLoad(ctx, src)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("locking: load slot scripts: %w", err)
	}
	return nil
}

// Time returns Redis's clock (TIME). One round trip.
func (s *Slots) Time(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("locking: TIME: %w", err)
	}
	return t, nil
}

// call is one script call of a batch.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// batch sends calls in one pipeline: one round trip on a single server (one
// per master involved on a cluster). Calls that meet an empty script cache
// (NOSCRIPT, after a restart or failover) are sent again with EVAL in a second
// pipeline. The returned commands carry each call's own result or error.
func (s *Slots) batch(ctx context.Context, calls []call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := s.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

// replies returns the n replies of a batched script call, one per item.
func replies(cmd *redis.Cmd, n int) ([]any, error) {
	vals, err := cmd.Slice()
	if err == nil && len(vals) != n {
		err = fmt.Errorf("%d replies for %d items", len(vals), n)
	}
	return vals, err
}

// Claim sends every claim in one pipeline: one round trip for all the jobs due
// at an instant, however many. On a single server the claims share one script
// call, on a Cluster one call per hash slot. It returns one result per claim,
// in order; a claim that failed on its own has Err set. The error is non-nil
// only for invalid claims, and then nothing was sent.
func (s *Slots) Claim(ctx context.Context, claims []SlotClaim) ([]ClaimResult, error) {
	for i, c := range claims {
		if err := checkJob(c.Job); err != nil {
			return nil, fmt.Errorf("locking: Claim %d: %w", i, err)
		}
		if (c.Kind != ClaimMiss && c.LeaseTTL < minTTL) || c.Retention <= 0 {
			return nil, fmt.Errorf("locking: Claim %d (%s): lease TTL must be >= %v and retention > 0", i, c.Job, minTTL)
		}
	}
	tokens := make([]string, len(claims))
	var (
		calls  []call
		groups [][]int // the claims each call answers
	)
	for _, g := range s.group(claims) {
		if claims[g[0]].Kind == ClaimTakeover {
			calls = append(calls, s.takeoverCall(claims, tokens, g))
		} else {
			calls = append(calls, s.claimCall(claims, tokens, g))
		}
		groups = append(groups, g)
	}
	sent := time.Now()
	results := make([]ClaimResult, len(claims))
	for gi, cmd := range s.batch(ctx, calls) {
		g := groups[gi]
		vals, err := replies(cmd, len(g))
		for k, i := range g {
			var v []any
			if err == nil {
				v, _ = vals[k].([]any)
			}
			results[i] = s.parseClaim(ctx, claims[i], tokens[i], sent, v, err)
		}
	}
	return results, nil
}

// callKind is what the calls of a batch may not mix: the script, and the
// arguments a call shares (the replica, ARGV[1], for claims).
type callKind struct {
	takeover bool
	replica  string
}

// split groups items 0..n-1 into the sets that may share a script call:
// items of the same kind and, on a Cluster, the same hash slot of their job.
// An unknown client gets one call per item.
func (s *Slots) split(n int, item func(i int) (kind callKind, job string)) [][]int {
	type key struct {
		kind callKind
		slot uint16
	}
	var groups [][]int
	index := map[key]int{}
	for i := range n {
		if s.topology == topoSeparate {
			groups = append(groups, []int{i})
			continue
		}
		kind, job := item(i)
		k := key{kind: kind}
		if s.topology == topoCluster {
			k.slot = hashSlot(job)
		}
		gi, ok := index[k]
		if !ok {
			gi = len(groups)
			index[k] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups
}

// group splits claims for split: claims and takeovers apart (two scripts),
// one replica per call.
func (s *Slots) group(claims []SlotClaim) [][]int {
	return s.split(len(claims), func(i int) (callKind, string) {
		c := claims[i]
		return callKind{takeover: c.Kind == ClaimTakeover, replica: c.Replica}, c.Job
	})
}

// claimModes are slot_claim's ARGV mode for each kind of claim.
var claimModes = [...]string{ClaimLive: "live", ClaimCatchup: "wait", ClaimMiss: "miss"}

// claimProfile is what claims of one job share in slot_claim's arguments:
// sent once per call, not once per claim.
type claimProfile struct {
	ttl, retention int64
	overlap, mode  string
	reason         string
}

// claimCall is one slot_claim call for the claims at indexes g. It sets
// their tokens: the call's random base, a dot and the claim's position.
func (s *Slots) claimCall(claims []SlotClaim, tokens []string, g []int) call {
	base := newToken()
	index := map[claimProfile]int{}
	var profiles []any
	perClaim := make([]any, 0, 3*len(g))
	keys := make([]string, 0, 5*len(g))
	for k, i := range g {
		c := claims[i]
		slot := c.Slot.Unix()
		keys = append(keys, s.recordKey(c.Job, slot), s.leaseKey(c.Job, slot, c.AllowOverlap),
			s.fenceKey(c.Job), s.runsKey(c.Job), s.lastKey(c.Job))
		p := claimProfile{ttl: c.LeaseTTL.Milliseconds(), retention: c.Retention.Milliseconds(),
			overlap: "skip", mode: claimModes[c.Kind], reason: c.Reason}
		if c.AllowOverlap {
			p.overlap = "allow"
		}
		if p.reason == "" {
			p.reason = "misfire"
		}
		pi, ok := index[p]
		if !ok {
			pi = len(index) + 1
			index[p] = pi
			profiles = append(profiles, p.ttl, p.retention, p.overlap, p.mode, p.reason)
		}
		perClaim = append(perClaim, slot, c.Deadline.UnixMilli(), pi)
		tokens[i] = base + "." + strconv.Itoa(k+1)
	}
	args := make([]any, 0, 4+len(profiles)+len(perClaim))
	args = append(args, claims[g[0]].Replica, s.maxHistory, base, len(index))
	args = append(append(args, profiles...), perClaim...)
	return call{slotClaimScript, keys, args}
}

// takeoverCall is one slot_takeover call for the takeovers at indexes g. It
// sets their tokens.
func (s *Slots) takeoverCall(claims []SlotClaim, tokens []string, g []int) call {
	keys := make([]string, 0, 4*len(g))
	args := make([]any, 0, 2+6*len(g))
	args = append(args, claims[g[0]].Replica, s.maxHistory)
	for _, i := range g {
		c := claims[i]
		slot := c.Slot.Unix()
		tokens[i] = newToken()
		keys = append(keys, s.recordKey(c.Job, slot), s.leaseKey(c.Job, slot, c.AllowOverlap), s.fenceKey(c.Job), s.runsKey(c.Job))
		policy := "abandon"
		if c.Retry {
			policy = "retry"
		}
		args = append(args, tokens[i], slot, c.LeaseTTL.Milliseconds(), c.Retention.Milliseconds(), policy, c.MaxAttempts)
	}
	return call{slotTakeoverScript, keys, args}
}

func (s *Slots) parseClaim(ctx context.Context, c SlotClaim, token string, sent time.Time, vals []any, err error) ClaimResult {
	if err == nil && len(vals) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		return ClaimResult{Err: fmt.Errorf("locking: claim %s@%d: %w", c.Job, c.Slot.Unix(), err), Wait: -1}
	}
	r := reply(vals)
	res := ClaimResult{Outcome: Outcome(r.str(0)), Wait: -1}
	switch res.Outcome {
	case OutcomeWon:
		res.Fence, res.Attempt = r.int(1), int(r.int(2))
		res.Holder = c.Replica
		res.Lease = s.newSlotLease(ctx, c, token, res.Fence, res.Attempt, sent)
	case OutcomeLost:
		res.Holder, res.State = r.str(1), SlotState(r.str(2))
		res.Fence, res.Attempt = r.int(3), int(r.int(4))
	case OutcomeSkipped:
		res.Holder, res.HolderSlot, res.Wait = r.str(1), time.Unix(r.int(2), 0), r.ms(3)
	case OutcomeBusy:
		res.Holder, res.Wait = r.str(1), r.ms(2)
		if n := r.int(3); n > 0 {
			res.HolderSlot = time.Unix(n, 0)
		}
	case OutcomeMissed:
		res.Late = time.Duration(r.int(1)) * time.Millisecond
	case OutcomeAlive:
		res.Wait = r.ms(1)
	case OutcomeAbandoned:
		res.Holder, res.Attempt = r.str(1), int(r.int(2))
	case OutcomeClosed:
		res.State, res.Holder = SlotState(r.str(1)), r.str(2)
	case OutcomeGone:
	default:
		res.Err = fmt.Errorf("locking: claim %s@%d: unexpected reply %v", c.Job, c.Slot.Unix(), vals)
	}
	if r.err != nil && res.Err == nil {
		res.Err = fmt.Errorf("locking: claim %s@%d: %w in reply %v", c.Job, c.Slot.Unix(), r.err, vals)
	}
	return res
}

// reply reads a script's array reply; the first malformed element sets err.
type replyReader struct {
	vals []any
	err  error
}

func reply(vals []any) *replyReader { return &replyReader{vals: vals} }

func (r *replyReader) at(i int) any {
	if i >= len(r.vals) {
		if r.err == nil {
			r.err = fmt.Errorf("element %d missing", i)
		}
		return nil
	}
	return r.vals[i]
}

func (r *replyReader) str(i int) string {
	switch v := r.at(i).(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

func (r *replyReader) int(i int) int64 {
	switch v := r.at(i).(type) {
	case int64:
		return v
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil && r.err == nil {
			r.err = err
		}
		return n
	}
	if r.err == nil {
		r.err = errors.New("not a number")
	}
	return 0
}

// ms reads a PTTL: a duration, or -1 when the key has none or is gone.
func (r *replyReader) ms(i int) time.Duration {
	n := r.int(i)
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

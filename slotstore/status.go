package slotstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
)

// JobStates returns, for each job, the latest slot that has a record (the
// high-water mark) and the slots whose records are running; a job with
// neither is absent. It first takes in what replicas of protocol 1 left
// under each job's older keys (jobstates.lua): their fence, high-water mark,
// pause and history, and their running slots. A protocol-1 run whose lease
// still holds is left to the replica finishing it (OlderRuns counts those:
// read the job's state again within a lease TTL, which also keeps the copy
// of its lease current); the record of one whose lease is gone is
// converted, for a takeover to settle. Run it only while no replica of
// protocol 1 is in the registry (the scheduler does, at start and once they
// have left). Two round trips: the older running sets, then the scripts.
func (s *Store) JobStates(ctx context.Context, jobs []string) (map[string]slot.JobState, error) {
	for _, job := range jobs {
		if err := checkJob(job); err != nil {
			return nil, err
		}
	}
	pipe := s.rdb.Pipeline()
	older := make([]*redis.StringSliceCmd, len(jobs))
	for i, job := range jobs {
		older[i] = pipe.ZRange(ctx, s.v1RunningKey(job), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: reading protocol 1's running slots: %w", err)
	}
	var calls []call
	groups := s.split(len(jobs), func(i int) (callKind, string) { return callKind{}, jobs[i] })
	for _, g := range groups {
		var c call
		for _, i := range g {
			job, refs := jobs[i], older[i].Val()
			c.keys = append(c.keys, s.stateKey(job), s.v1LeaseKey(job), s.v1FenceKey(job), s.v1LastKey(job),
				s.v1RunningKey(job), s.v1PausedKey(job), s.v1RunsKey(job), s.ringKey(job))
			c.args = append(c.args, len(refs))
			for _, ref := range refs {
				c.keys = append(c.keys, s.refKey(job, ref), s.v1SlotLeaseKey(job, ref))
				c.args = append(c.args, ref)
			}
		}
		c.script = jobstatesScript
		calls = append(calls, c)
	}
	out := map[string]slot.JobState{}
	for gi, cmd := range s.batch(ctx, calls) {
		g := groups[gi]
		vals, err := replies(cmd, len(g))
		if err != nil {
			return nil, fmt.Errorf("slotstore: reading the jobs' states: %w", err)
		}
		for k, i := range g {
			v, _ := vals[k].([]any)
			r := reply(v)
			var st slot.JobState
			if last := r.int(0); last > 0 {
				st.Last = time.Unix(last, 0)
			}
			if err := readRunning(&st, r.str(1)); err != nil {
				return nil, fmt.Errorf("slotstore: reading the state of %s: %w", jobs[i], err)
			}
			st.OlderRuns = int(r.int(3))
			if r.err != nil {
				return nil, fmt.Errorf("slotstore: reading the state of %s: %w in reply %v", jobs[i], r.err, v)
			}
			if !st.Last.IsZero() || len(st.Running)+len(st.RunningManual) > 0 {
				out[jobs[i]] = st
			}
		}
	}
	return out, nil
}

// readRunning reads a job state's running field (refs, space-separated)
// into st: its scheduled slots, oldest first, and its manual slots' IDs.
func readRunning(st *slot.JobState, list string) error {
	for _, ref := range strings.Fields(list) {
		if id, ok := strings.CutPrefix(ref, manualRef("")); ok {
			st.RunningManual = append(st.RunningManual, id)
			continue
		}
		at, err := strconv.ParseInt(ref, 10, 64)
		if err != nil {
			return fmt.Errorf("running slot %q: %w", ref, err)
		}
		st.Running = append(st.Running, time.Unix(at, 0))
	}
	slices.SortFunc(st.Running, time.Time.Compare)
	return nil
}

// Running returns, per job, the slots its state lists running (Running and
// RunningManual; jobs with none are left out), in one round trip of an HGET
// per job, changing nothing: unlike JobStates it reads nothing of protocol
// 1, so it may run while replicas of protocol 1 are live. What a replica
// reads when another has left the registry, to watch the slots it ran.
func (s *Store) Running(ctx context.Context, jobs []string) (map[string]slot.JobState, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(jobs))
	for i, job := range jobs {
		if err := checkJob(job); err != nil {
			return nil, err
		}
		cmds[i] = pipe.HGet(ctx, s.stateKey(job), "running")
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error: a job with no state answers redis.Nil
	out := map[string]slot.JobState{}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("slotstore: reading the running slots of %s: %w", jobs[i], err)
		}
		var st slot.JobState
		if err := readRunning(&st, cmd.Val()); err != nil {
			return nil, fmt.Errorf("slotstore: reading the state of %s: %w", jobs[i], err)
		}
		if len(st.Running)+len(st.RunningManual) > 0 {
			out[jobs[i]] = st
		}
	}
	return out, nil
}

// readRecords reads the records of job's slots by their refs, in one round
// trip, and a second for any that is a protocol-1 record (a hash): one per
// ref, ok false where a slot has none.
func (s *Store) readRecords(ctx context.Context, job string, refs []string) ([]slot.Record, []bool, error) {
	recs, ok := make([]slot.Record, len(refs)), make([]bool, len(refs))
	if len(refs) == 0 {
		return recs, ok, nil
	}
	keys := make([]string, len(refs))
	for i, ref := range refs {
		keys[i] = s.refKey(job, ref)
	}
	pipe := s.rdb.Pipeline()
	mget := pipe.MGet(ctx, keys...) // one job's keys share a hash slot
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, fmt.Errorf("slotstore: reading the records of %s: %w", job, err)
	}
	var hashes []int
	for i, v := range mget.Val() {
		str, isString := v.(string)
		if !isString {
			hashes = append(hashes, i) // none, or a protocol-1 record: MGET answers nil for both
			continue
		}
		rec, err := parseRecord(job, str)
		if err != nil {
			return nil, nil, fmt.Errorf("slotstore: the record of %s %s: %w", job, refs[i], err)
		}
		recs[i], ok[i] = rec, true
	}
	if len(hashes) == 0 {
		return recs, ok, nil
	}
	pipe = s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(hashes))
	for k, i := range hashes {
		cmds[k] = pipe.HGetAll(ctx, keys[i])
	}
	// Exec answers the first command's error; each HGETALL's is its own: a
	// WRONGTYPE is a record written since the MGET, as a string, which this
	// read, as of the MGET, does not see.
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return nil, nil, fmt.Errorf("slotstore: reading the records of %s: %w", job, err)
	}
	for k, i := range hashes {
		h, err := cmds[k].Result()
		if err != nil || len(h) == 0 {
			continue
		}
		at, _ := strconv.ParseInt(refs[i], 10, 64)
		recs[i], ok[i] = parseRecordV1(job, at, h), true
	}
	return recs, ok, nil
}

// Record returns one slot's record; ok is false when it has none (never
// claimed, or older than the retention). One round trip (two for a record
// that protocol 1 wrote).
func (s *Store) Record(ctx context.Context, job string, at time.Time) (rec slot.Record, ok bool, err error) {
	if err := checkJob(job); err != nil {
		return rec, false, err
	}
	recs, oks, err := s.readRecords(ctx, job, []string{strconv.FormatInt(at.Unix(), 10)})
	if err != nil {
		return rec, false, err
	}
	return recs[0], oks[0], nil
}

// ManualRecord returns a manual slot's record; ok is false when it has none
// (never asked for, or older than the retention). One round trip.
func (s *Store) ManualRecord(ctx context.Context, job, id string) (rec slot.Record, ok bool, err error) {
	if err := checkJob(job); err != nil {
		return rec, false, err
	}
	if err := slot.CheckManualID(id); err != nil {
		return rec, false, err
	}
	recs, oks, err := s.readRecords(ctx, job, []string{manualRef(id)})
	if err != nil {
		return rec, false, err
	}
	return recs[0], oks[0], nil
}

// endedRing is how many ended slots a job's state keeps (record_lib.lua's
// ended_ring): Records lists at most that many besides the running ones.
const endedRing = 32

// Records returns the job's latest slot records, newest first, at most n:
// the slots running now and the 32 that ended last (the job's state keeps
// a ring of them), whose records are still kept. Two round trips.
func (s *Store) Records(ctx context.Context, job string, n int) ([]slot.Record, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	state := pipe.HMGet(ctx, s.stateKey(job), "running", "ends")
	ring := pipe.HGetAll(ctx, s.ringKey(job))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: reading the state of %s: %w", job, err)
	}
	running, _ := state.Val()[0].(string)
	count, _ := state.Val()[1].(string)
	refs := strings.Fields(running)
	seen := map[string]bool{}
	for _, ref := range refs {
		seen[ref] = true
	}
	ends, _ := strconv.Atoi(count)
	for k := range min(ends, endedRing) { // newest first
		if ref := ring.Val()[strconv.Itoa((ends-1-k)%endedRing)]; ref != "" && !seen[ref] {
			seen[ref] = true
			refs = append(refs, ref)
		}
	}
	found, ok, err := s.readRecords(ctx, job, refs)
	if err != nil {
		return nil, err
	}
	var recs []slot.Record
	for i, rec := range found {
		if ok[i] {
			recs = append(recs, rec)
		}
	}
	slices.SortStableFunc(recs, func(a, b slot.Record) int { return b.Slot.Compare(a.Slot) })
	return recs[:min(n, len(recs))], nil
}

// Holder returns the replica whose run holds the job's lease, the slot of
// that run and the lease's remaining TTL; replica is "" when no run holds it.
// Jobs that allow overlap have one lease per slot and no job-wide holder.
// One round trip.
func (s *Store) Holder(ctx context.Context, job string) (replica string, at time.Time, ttl time.Duration, err error) {
	return s.hold(ctx, job, "lease")
}

// Turn returns the retry that has the job's turn (on_owner_lost retry under
// overlap skip: its takeover found another run holding the job, and the job
// is kept for it once that run ends; see claim.lua): the replica that will
// run it, the slot it retries (zero for a manual slot) and how long the
// turn stands unless that replica comes back; replica is "" when no retry
// has it. One round trip.
func (s *Store) Turn(ctx context.Context, job string) (replica string, at time.Time, ttl time.Duration, err error) {
	return s.hold(ctx, job, "turn")
}

// hold reads a lease-shaped field of the job's state ("<token> <ref>
// <until_ms> <replica>": the lease, or a retry's turn) on Redis's clock:
// its replica, its slot (zero for a manual slot) and the time it has left;
// replica is "" when it is free or has lapsed. One round trip.
func (s *Store) hold(ctx context.Context, job, what string) (replica string, at time.Time, ttl time.Duration, err error) {
	if err := checkJob(job); err != nil {
		return "", time.Time{}, 0, err
	}
	pipe := s.rdb.Pipeline()
	clock := pipe.Time(ctx)
	field := pipe.HGet(ctx, s.stateKey(job), what)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", time.Time{}, 0, fmt.Errorf("slotstore: reading the %s of %s: %w", what, job, err)
	}
	v, now := field.Val(), clock.Val()
	if v == "" {
		return "", time.Time{}, 0, nil
	}
	_, rest, _ := strings.Cut(v, " ")
	ref, rest, _ := strings.Cut(rest, " ")
	untilText, replica, ok := strings.Cut(rest, " ")
	until, err := strconv.ParseInt(untilText, 10, 64)
	if !ok || err != nil {
		return "", time.Time{}, 0, fmt.Errorf("slotstore: the %s of %s is malformed: %q", what, job, v)
	}
	ttl = time.UnixMilli(until).Sub(now)
	if ttl <= 0 { // lapsed
		return "", time.Time{}, 0, nil
	}
	if strings.HasPrefix(ref, manualRef("")) { // a manual slot: no slot time
		return replica, time.Time{}, ttl, nil
	}
	unix, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return "", time.Time{}, 0, fmt.Errorf("slotstore: the %s of %s is malformed: %q", what, job, v)
	}
	return replica, time.Unix(unix, 0), ttl, nil
}

// maxPerMGet bounds the keys of one MGET: reading a record costs Redis about
// 1 µs, and an MGET of 8,000 (a hedging replica's share of 10,000 jobs due at
// once) took 9 ms, holding up every other client. A batch's MGETs still go in
// one pipeline: one round trip.
const maxPerMGet = 256

// Peek reads the records of the claims' slots (state and owner) in one
// round trip, changing nothing: what a replica does before a hedged claim
// or a takeover check, which most of the time settles it. A slot with no
// record, or a protocol-1 record, reads as a zero Record (the claim then
// decides). On a single server it is an MGET per maxPerMGet slots;
// otherwise one GET per slot.
func (s *Store) Peek(ctx context.Context, claims []slot.Claim) ([]slot.Record, error) {
	keys := make([]string, len(claims))
	for i, c := range claims {
		if err := checkJob(c.Job); err != nil {
			return nil, err
		}
		keys[i] = s.recordOf(c)
	}
	vals := make([]any, len(claims))
	pipe := s.rdb.Pipeline()
	if s.topology == topoSingle {
		var cmds []*redis.SliceCmd
		for i := 0; i < len(keys); i += maxPerMGet {
			cmds = append(cmds, pipe.MGet(ctx, keys[i:min(i+maxPerMGet, len(keys))]...))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("slotstore: peeking at %d slot records: %w", len(claims), err)
		}
		for k, cmd := range cmds {
			copy(vals[k*maxPerMGet:], cmd.Val())
		}
	} else {
		cmds := make([]*redis.StringCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.Get(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, fmt.Errorf("slotstore: peeking at %d slot records: %w", len(claims), err)
		}
		for i, cmd := range cmds {
			if v, err := cmd.Result(); err == nil {
				vals[i] = v
			}
		}
	}
	out := make([]slot.Record, len(claims))
	for i, c := range claims {
		out[i] = slot.Record{Job: c.Job, Slot: c.Slot}
		v, _ := vals[i].(string)
		if v == "" {
			continue
		}
		// "<state> <fence> ..." and the owner, the first text field.
		r, err := parseRaw(v)
		if err != nil {
			continue // the claim decides
		}
		out[i].State, out[i].Owner = slot.State(r.state), r.owner
	}
	return out, nil
}

// Missing returns the indexes, in order, of the slots that have no record
// (of either protocol), in one round trip when every slot has one,
// changing nothing: the late check of a replica that a slot's routing does
// not ask to claim it, so that the slot still ends with a record when every
// replica it asks is gone. On a single server it is an EXISTS per maxPerMGet
// slots, answered with a count: only a group short of records is read again,
// a key at a time, in a second round trip. Otherwise it is one EXISTS per
// slot. The slots must be distinct: a count cannot tell a slot listed twice
// from two slots.
func (s *Store) Missing(ctx context.Context, slots []slot.Ref) ([]int, error) {
	keys := make([]string, len(slots))
	for i, r := range slots {
		if err := checkJob(r.Job); err != nil {
			return nil, err
		}
		keys[i] = s.recordKey(r.Job, r.At.Unix())
	}
	fail := func(err error) ([]int, error) {
		return nil, fmt.Errorf("slotstore: looking for the records of %d slots: %w", len(slots), err)
	}
	var short []int // the first index of each group found short of records
	if s.topology == topoSingle {
		pipe := s.rdb.Pipeline()
		var cmds []*redis.IntCmd
		for i := 0; i < len(keys); i += maxPerMGet {
			cmds = append(cmds, pipe.Exists(ctx, keys[i:min(i+maxPerMGet, len(keys))]...))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fail(err)
		}
		for k, cmd := range cmds {
			if n := min(maxPerMGet, len(keys)-k*maxPerMGet); cmd.Val() < int64(n) {
				short = append(short, k*maxPerMGet)
			}
		}
		if len(short) == 0 {
			return nil, nil
		}
	}
	pipe := s.rdb.Pipeline()
	var at []int
	var cmds []*redis.IntCmd
	one := func(i int) {
		at = append(at, i)
		cmds = append(cmds, pipe.Exists(ctx, keys[i]))
	}
	if s.topology == topoSingle {
		for _, first := range short {
			for i := first; i < min(first+maxPerMGet, len(keys)); i++ {
				one(i)
			}
		}
	} else {
		for i := range keys {
			one(i)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fail(err)
	}
	var missing []int
	for k, cmd := range cmds {
		if cmd.Val() == 0 {
			missing = append(missing, at[k])
		}
	}
	return missing, nil
}

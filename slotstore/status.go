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
// high-water mark the claim script keeps) and the slots whose records are
// running; a job with neither is absent. One round trip.
func (s *Store) JobStates(ctx context.Context, jobs []string) (map[string]slot.JobState, error) {
	pipe := s.rdb.Pipeline()
	lasts := make([]*redis.FloatCmd, len(jobs))
	running := make([]*redis.StringSliceCmd, len(jobs))
	for i, job := range jobs {
		if err := checkJob(job); err != nil {
			return nil, err
		}
		lasts[i] = pipe.ZScore(ctx, s.lastKey(job), "last")
		running[i] = pipe.ZRange(ctx, s.runningKey(job), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("slotstore: reading the running slots: %w", err)
	}
	out := map[string]slot.JobState{}
	for i, job := range jobs {
		var st slot.JobState
		n, err := lasts[i].Result()
		switch {
		case err == nil:
			st.Last = time.Unix(int64(n), 0)
		case !errors.Is(err, redis.Nil):
			return nil, fmt.Errorf("slotstore: reading the running slots of %s: %w", job, err)
		}
		for _, m := range running[i].Val() {
			if id, ok := strings.CutPrefix(m, manualRef("")); ok {
				st.RunningManual = append(st.RunningManual, id)
				continue
			}
			at, err := strconv.ParseInt(m, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("slotstore: reading the running slots of %s: slot %q: %w", job, m, err)
			}
			st.Running = append(st.Running, time.Unix(at, 0))
		}
		if !st.Last.IsZero() || len(st.Running)+len(st.RunningManual) > 0 {
			out[job] = st
		}
	}
	return out, nil
}

// Record returns one slot's record; ok is false when it has none (never
// claimed, or older than the retention). One round trip.
func (s *Store) Record(ctx context.Context, job string, at time.Time) (rec slot.Record, ok bool, err error) {
	if err := checkJob(job); err != nil {
		return rec, false, err
	}
	pipe := s.rdb.Pipeline()
	cmd := pipe.HGetAll(ctx, s.recordKey(job, at.Unix()))
	if _, err := pipe.Exec(ctx); err != nil {
		return rec, false, fmt.Errorf("slotstore: reading the record of slot %s@%d: %w", job, at.Unix(), err)
	}
	h := cmd.Val()
	if len(h) == 0 {
		return rec, false, nil
	}
	return parseRecord(job, at.Unix(), h), true, nil
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
	pipe := s.rdb.Pipeline()
	cmd := pipe.HGetAll(ctx, s.jobKey(job, "manual:"+id))
	if _, err := pipe.Exec(ctx); err != nil {
		return rec, false, fmt.Errorf("slotstore: reading the record of manual slot %s %s: %w", job, id, err)
	}
	h := cmd.Val()
	if len(h) == 0 {
		return rec, false, nil
	}
	return parseRecord(job, 0, h), true, nil
}

// Records returns the job's latest slot records, newest first, at most n:
// the slots running now and those named by its run history (of slots' ends),
// whose records are still kept. Two round trips.
func (s *Store) Records(ctx context.Context, job string, n int) ([]slot.Record, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	running := pipe.ZRevRange(ctx, s.runningKey(job), 0, int64(n-1))
	entries, err := s.xrevrange(ctx, pipe, job, int64(8*n))
	if err != nil {
		return nil, err
	}
	var refs []string // unix seconds, or a manual slot's reference
	seen := map[string]bool{}
	for _, ref := range running.Val() {
		seen[ref] = true
		refs = append(refs, ref)
	}
	ended := 0
	for _, e := range entries {
		ref := fmt.Sprint(e.Values["slot"])
		if seen[ref] {
			continue
		}
		if _, err := strconv.ParseInt(ref, 10, 64); err != nil && !strings.HasPrefix(ref, manualRef("")) {
			continue
		}
		seen[ref] = true
		refs = append(refs, ref)
		if ended++; ended == n {
			break
		}
	}
	pipe = s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(refs))
	for i, ref := range refs {
		if id, ok := strings.CutPrefix(ref, manualRef("")); ok {
			cmds[i] = pipe.HGetAll(ctx, s.jobKey(job, "manual:"+id))
		} else {
			at, _ := strconv.ParseInt(ref, 10, 64)
			cmds[i] = pipe.HGetAll(ctx, s.recordKey(job, at))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: reading the slot records of %s: %w", job, err)
	}
	var recs []slot.Record
	for i, cmd := range cmds {
		if h := cmd.Val(); len(h) > 0 {
			at, _ := strconv.ParseInt(refs[i], 10, 64)
			recs = append(recs, parseRecord(job, at, h))
		}
	}
	slices.SortFunc(recs, func(a, b slot.Record) int { return b.Slot.Compare(a.Slot) })
	return recs[:min(n, len(recs))], nil
}

func (s *Store) xrevrange(ctx context.Context, pipe redis.Pipeliner, job string, count int64) ([]redis.XMessage, error) {
	cmd := pipe.XRevRangeN(ctx, s.runsKey(job), "+", "-", count)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: history of %s: %w", job, err)
	}
	return cmd.Val(), nil
}

// Holder returns the replica whose run holds the job's lease, the slot of
// that run and the lease's remaining TTL; replica is "" when no run holds it.
// Jobs that allow overlap have one lease per slot and no job-wide holder.
// One round trip.
func (s *Store) Holder(ctx context.Context, job string) (replica string, at time.Time, ttl time.Duration, err error) {
	if err := checkJob(job); err != nil {
		return "", time.Time{}, 0, err
	}
	pipe := s.rdb.Pipeline()
	g := pipe.Get(ctx, s.leaseKey(job, 0, false))
	p := pipe.PTTL(ctx, s.leaseKey(job, 0, false))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", time.Time{}, 0, fmt.Errorf("slotstore: reading the lease of %s: %w", job, err)
	}
	if errors.Is(g.Err(), redis.Nil) {
		return "", time.Time{}, 0, nil
	}
	_, rest, _ := strings.Cut(g.Val(), " ") // "<token> <slot> <replica>"
	unixText, replica, ok := strings.Cut(rest, " ")
	if strings.HasPrefix(unixText, manualRef("")) && ok { // a manual run holds the job: no slot time
		return replica, time.Time{}, p.Val(), nil
	}
	unix, err := strconv.ParseInt(unixText, 10, 64)
	if !ok || err != nil {
		return "", time.Time{}, 0, fmt.Errorf("slotstore: the lease of %s is malformed: %q", job, g.Val())
	}
	return replica, time.Unix(unix, 0), p.Val(), nil
}

func parseRecord(job string, at int64, h map[string]string) slot.Record {
	ms := func(k string) time.Time {
		n, err := strconv.ParseInt(h[k], 10, 64)
		if err != nil || n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	attempt, _ := strconv.Atoi(h["attempt"])
	fence, _ := strconv.ParseInt(h["fence"], 10, 64)
	rec := slot.Record{
		Job: job, Slot: time.Unix(at, 0), State: slot.State(h["state"]), Owner: h["owner"],
		Attempt: attempt, Fence: fence, Started: ms("started"), Finished: ms("finished"), Error: h["error"], RunID: h["run_id"], Result: h["result"],
	}
	if h["kind"] == "manual" {
		rec.Slot = ms("at")
		rec.Manual = &slot.Manual{ID: strings.TrimPrefix(h["slot"], manualRef("")), By: h["by"], Note: h["note"]}
	}
	return rec
}

// Peek returns the state and owner of the record of each claim's slot (a
// zero Record when it has none), in one round trip, changing nothing: a
// plain read, far cheaper for Redis than a claim that finds a record.
func (s *Store) Peek(ctx context.Context, claims []slot.Claim) ([]slot.Record, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(claims))
	for i, c := range claims {
		if err := checkJob(c.Job); err != nil {
			return nil, err
		}
		_, record, _ := s.target(c, false)
		cmds[i] = pipe.HMGet(ctx, record, "state", "owner")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: peeking at %d slot records: %w", len(claims), err)
	}
	out := make([]slot.Record, len(claims))
	for i, c := range claims {
		out[i] = slot.Record{Job: c.Job, Slot: c.Slot}
		v := cmds[i].Val()
		if len(v) == 2 {
			st, _ := v[0].(string)
			owner, _ := v[1].(string)
			out[i].State, out[i].Owner = slot.State(st), owner
		}
	}
	return out, nil
}

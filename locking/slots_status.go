package locking

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LastSlots returns, for each job, the latest slot that has a record (the
// high-water mark the claim script keeps); a job with none is absent. One
// round trip.
func (s *Slots) LastSlots(ctx context.Context, jobs []string) (map[string]time.Time, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.FloatCmd, len(jobs))
	for i, job := range jobs {
		if err := checkJob(job); err != nil {
			return nil, err
		}
		cmds[i] = pipe.ZScore(ctx, s.lastKey(job), "last")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("locking: LastSlots: %w", err)
	}
	last := map[string]time.Time{}
	for i, cmd := range cmds {
		n, err := cmd.Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("locking: LastSlots %s: %w", jobs[i], err)
		}
		last[jobs[i]] = time.Unix(int64(n), 0)
	}
	return last, nil
}

// SlotRecord is a slot record as stored.
type SlotRecord struct {
	Job      string
	Slot     time.Time
	State    SlotState
	Owner    string // the replica that ran it, or recorded it missed or skipped
	Attempt  int
	Fence    int64
	Started  time.Time // zero for a slot that never started
	Finished time.Time // zero while running
	Error    string
}

// Record returns one slot's record; ok is false when it has none (never
// claimed, or older than the retention). One round trip.
func (s *Slots) Record(ctx context.Context, job string, slot time.Time) (rec SlotRecord, ok bool, err error) {
	if err := checkJob(job); err != nil {
		return rec, false, err
	}
	pipe := s.rdb.Pipeline()
	cmd := pipe.HGetAll(ctx, s.recordKey(job, slot.Unix()))
	if _, err := pipe.Exec(ctx); err != nil {
		return rec, false, fmt.Errorf("locking: Record %s@%d: %w", job, slot.Unix(), err)
	}
	h := cmd.Val()
	if len(h) == 0 {
		return rec, false, nil
	}
	return parseRecord(job, slot.Unix(), h), true, nil
}

// Records returns the job's latest slot records, newest first, at most n:
// the slots named by its run history whose records are still kept. Two round
// trips.
func (s *Slots) Records(ctx context.Context, job string, n int) ([]SlotRecord, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	entries, err := s.xrevrange(ctx, pipe, job, int64(8*n))
	if err != nil {
		return nil, err
	}
	var slots []int64
	seen := map[int64]bool{}
	for _, e := range entries {
		slot, err := strconv.ParseInt(fmt.Sprint(e.Values["slot"]), 10, 64)
		if err != nil || seen[slot] {
			continue
		}
		seen[slot] = true
		slots = append(slots, slot)
		if len(slots) == n {
			break
		}
	}
	pipe = s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(slots))
	for i, slot := range slots {
		cmds[i] = pipe.HGetAll(ctx, s.recordKey(job, slot))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("locking: Records %s: %w", job, err)
	}
	var recs []SlotRecord
	for i, cmd := range cmds {
		if h := cmd.Val(); len(h) > 0 {
			recs = append(recs, parseRecord(job, slots[i], h))
		}
	}
	slices.SortFunc(recs, func(a, b SlotRecord) int { return b.Slot.Compare(a.Slot) })
	return recs, nil
}

func (s *Slots) xrevrange(ctx context.Context, pipe redis.Pipeliner, job string, count int64) ([]redis.XMessage, error) {
	cmd := pipe.XRevRangeN(ctx, s.runsKey(job), "+", "-", count)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("locking: history of %s: %w", job, err)
	}
	return cmd.Val(), nil
}

// Holder returns the replica whose run holds the job's lease, the slot of
// that run and the lease's remaining TTL; replica is "" when no run holds it.
// Jobs that allow overlap have one lease per slot and no job-wide holder.
// One round trip.
func (s *Slots) Holder(ctx context.Context, job string) (replica string, slot time.Time, ttl time.Duration, err error) {
	if err := checkJob(job); err != nil {
		return "", time.Time{}, 0, err
	}
	pipe := s.rdb.Pipeline()
	g := pipe.Get(ctx, s.leaseKey(job, 0, false))
	p := pipe.PTTL(ctx, s.leaseKey(job, 0, false))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", time.Time{}, 0, fmt.Errorf("locking: Holder %s: %w", job, err)
	}
	if errors.Is(g.Err(), redis.Nil) {
		return "", time.Time{}, 0, nil
	}
	_, rest, _ := strings.Cut(g.Val(), " ") // "<token> <slot> <replica>"
	unixText, replica, ok := strings.Cut(rest, " ")
	unix, err := strconv.ParseInt(unixText, 10, 64)
	if !ok || err != nil {
		return "", time.Time{}, 0, fmt.Errorf("locking: Holder %s: malformed lease %q", job, g.Val())
	}
	return replica, time.Unix(unix, 0), p.Val(), nil
}

func parseRecord(job string, slot int64, h map[string]string) SlotRecord {
	ms := func(k string) time.Time {
		n, err := strconv.ParseInt(h[k], 10, 64)
		if err != nil || n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	attempt, _ := strconv.Atoi(h["attempt"])
	fence, _ := strconv.ParseInt(h["fence"], 10, 64)
	return SlotRecord{
		Job: job, Slot: time.Unix(slot, 0), State: SlotState(h["state"]), Owner: h["owner"],
		Attempt: attempt, Fence: fence, Started: ms("started"), Finished: ms("finished"), Error: h["error"],
	}
}

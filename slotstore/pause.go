package slotstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
)

// Pause pauses job across every replica: from the next claim on, each of its
// slots is recorded paused, with note and by, and none runs. Runs in
// progress go on. It reports whether the job was running (false: a pause
// stood, and now has this note and by; with no note it is left as it
// stood, its note and by kept), and since when the pause that now
// stands holds, on Redis's clock: a pause that stood keeps its time, so
// every Pause while it stands, a Pause sent again after its reply was lost
// included, answers the same since. The pause is written where replicas of
// protocol 1 read it too, so that it holds while a deployment upgrades
// (versions older than pauses ignore it). Every paused slot's record holds
// note and by, so each may be at most slot.MaxNote bytes.
func (s *Store) Pause(ctx context.Context, job, note, by string) (changed bool, since time.Time, err error) {
	if err := checkJob(job); err != nil {
		return false, time.Time{}, fmt.Errorf("slotstore: pausing: %w", err)
	}
	if by == "" {
		return false, time.Time{}, fmt.Errorf("slotstore: pausing %s: say who pauses it (by)", job)
	}
	if err := errors.Join(slot.CheckNote("by", by), slot.CheckNote("the note", note)); err != nil {
		return false, time.Time{}, fmt.Errorf("slotstore: pausing %s: %w", job, err)
	}
	vals, err := pauseScript.Run(ctx, s.rdb, []string{s.stateKey(job), s.v1PausedKey(job)}, "pause", note, by).Slice()
	if err != nil {
		return false, time.Time{}, fmt.Errorf("slotstore: pausing %s: %w", job, err)
	}
	r := reply(vals)
	changed, since = r.int(0) == 1, time.UnixMilli(r.int(1))
	if r.err != nil {
		return false, time.Time{}, fmt.Errorf("slotstore: pausing %s: %w in reply %v", job, r.err, vals)
	}
	return changed, since, nil
}

// Resume ends job's pause: the next slot runs. It reports whether the job was
// paused.
func (s *Store) Resume(ctx context.Context, job string) (bool, error) {
	if err := checkJob(job); err != nil {
		return false, fmt.Errorf("slotstore: resuming: %w", err)
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{s.stateKey(job), s.v1PausedKey(job)}, "resume").Int()
	if err != nil {
		return false, fmt.Errorf("slotstore: resuming %s: %w", job, err)
	}
	return n == 1, nil
}

// Pauses returns the pauses that stand among jobs, by job: those in the
// jobs' states, and for a job whose protocol-1 keys were never read in (no
// replica of protocol 2 has started yet), its protocol-1 pause. One round
// trip.
func (s *Store) Pauses(ctx context.Context, jobs []string) (map[string]slot.Pause, error) {
	pipe := s.rdb.Pipeline()
	states := make([]*redis.SliceCmd, len(jobs))
	older := make([]*redis.MapStringStringCmd, len(jobs))
	for i, job := range jobs {
		states[i] = pipe.HMGet(ctx, s.stateKey(job), "paused_by", "paused_note", "paused_at", "v")
		older[i] = pipe.HGetAll(ctx, s.v1PausedKey(job))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: reading pauses: %w", err)
	}
	out := map[string]slot.Pause{}
	for i, job := range jobs {
		f := make([]string, 4)
		for k, v := range states[i].Val() {
			f[k], _ = v.(string)
		}
		by, note, at := f[0], f[1], f[2]
		if h := older[i].Val(); f[3] == "" && by == "" {
			by, note, at = h["by"], h["note"], h["at"]
		}
		if by == "" {
			continue
		}
		ms, _ := strconv.ParseInt(at, 10, 64)
		out[job] = slot.Pause{Note: note, By: by, At: time.UnixMilli(ms)}
	}
	return out, nil
}

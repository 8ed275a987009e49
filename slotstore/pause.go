package slotstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// Pause pauses job across every replica: from the next claim on, each of its
// slots is recorded paused, with note and by, and none runs. Runs in
// progress go on. It reports whether the job was running (false: a pause
// stood, and now has this note). Every replica must run a version that knows
// pauses (older claim scripts don't read the key).
func (s *Store) Pause(ctx context.Context, job, note, by string) (bool, error) {
	if err := checkJob(job); err != nil {
		return false, fmt.Errorf("slotstore: pausing: %w", err)
	}
	if by == "" {
		return false, fmt.Errorf("slotstore: pausing %s: say who pauses it (by)", job)
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{s.pausedKey(job)}, "pause", note, by).Int()
	if err != nil {
		return false, fmt.Errorf("slotstore: pausing %s: %w", job, err)
	}
	return n == 1, nil
}

// Resume ends job's pause: the next slot runs. It reports whether the job was
// paused.
func (s *Store) Resume(ctx context.Context, job string) (bool, error) {
	if err := checkJob(job); err != nil {
		return false, fmt.Errorf("slotstore: resuming: %w", err)
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{s.pausedKey(job)}, "resume").Int()
	if err != nil {
		return false, fmt.Errorf("slotstore: resuming %s: %w", job, err)
	}
	return n == 1, nil
}

// Pauses returns the pauses that stand among jobs, by job.
func (s *Store) Pauses(ctx context.Context, jobs []string) (map[string]slot.Pause, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]interface {
		Val() map[string]string
		Err() error
	}, len(jobs))
	for i, job := range jobs {
		cmds[i] = pipe.HGetAll(ctx, s.pausedKey(job))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("slotstore: reading pauses: %w", err)
	}
	out := map[string]slot.Pause{}
	for i, job := range jobs {
		h := cmds[i].Val()
		if h["by"] == "" {
			continue
		}
		ms, _ := strconv.ParseInt(h["at"], 10, 64)
		out[job] = slot.Pause{Note: h["note"], By: h["by"], At: time.UnixMilli(ms)}
	}
	return out, nil
}

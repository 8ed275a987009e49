package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// Func is a job: the work of one run.
type Func func(ctx context.Context, run Run) error

// Run describes one run of a job.
type Run struct {
	// Job is the job's name.
	Job string
	// Slot is the scheduled time this run is for, from the cron expression;
	// for a manual slot, when it was asked for: its record's time (its first
	// claim, on Redis's clock), the same for every attempt.
	Slot time.Time
	// Manual is set when the run is of a manual slot (worker trigger,
	// Scheduler.Trigger): its ID, who asked and their note. Its record is
	// the manual slot's own (slotstore.RecordKeyOf names it).
	Manual *slot.Manual
	// Attempt counts the runs of this slot, from 1; it grows when another
	// replica takes over a slot whose owner was lost (on_owner_lost: retry).
	Attempt int
	// Fence grows with every claim of this job, attempts included. Stores
	// that refuse a fence lower than the highest they have seen are safe
	// from a paused former owner.
	Fence int64
	// Replica is the ID of the replica that runs this attempt.
	Replica string
	// Token is the secret that proves this attempt's lease.
	Token string
	// RunID names this attempt: a UUIDv7, in the slot's record, on the
	// run's spans (slotcron.run_id) and on its log lines. Not a secret.
	RunID string
	// Logger is the scheduler's logger (the worker's JSON log) with the
	// run's attributes: job, slot, fence, attempt and replica. Log through
	// it, and a job's lines carry the run they belong to. It is never nil
	// in a run the scheduler starts.
	Logger *slog.Logger
}

type runKey struct{}

// WithRun returns a copy of ctx that carries run.
func WithRun(ctx context.Context, run Run) context.Context {
	return context.WithValue(ctx, runKey{}, run)
}

// FromContext returns the Run that ctx carries, and whether it carries one.
// The scheduler puts it in every job's context.
func FromContext(ctx context.Context) (Run, bool) {
	run, ok := ctx.Value(runKey{}).(Run)
	return run, ok
}

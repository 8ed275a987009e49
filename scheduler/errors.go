package scheduler

import "errors"

var (
	// ErrRunning means Run was called on a Scheduler that is running or has run.
	ErrRunning = errors.New("scheduler: Run called twice")

	// ErrShutdown is the cause of a job's context when the scheduler stops
	// and the shutdown grace has passed.
	ErrShutdown = errors.New("scheduler: shutdown")

	// ErrOlderProtocol means a Backfill, RunManual or Trigger claimed nothing
	// (more) because replicas of an older slot protocol are live: they do not
	// see this protocol's leases and keep fences of their own, so the two
	// must not claim side by side. The error that wraps it names them.
	ErrOlderProtocol = errors.New("scheduler: replicas of an older slot protocol are live")
)

package scheduler

import "errors"

var (
	// ErrRunning means Run was called on a Scheduler that is running or has run.
	ErrRunning = errors.New("scheduler: Run called twice")

	// ErrShutdown is the cause of a job's context when the scheduler stops
	// and the shutdown grace has passed.
	ErrShutdown = errors.New("scheduler: shutdown")
)

package jobs

import "errors"

var (
	// ErrInvalidName reports a job name that is empty or has a character
	// outside [A-Za-z0-9_.-].
	ErrInvalidName = errors.New("jobs: invalid name")

	// ErrDuplicate reports a second Register under one name.
	ErrDuplicate = errors.New("jobs: duplicate name")

	// ErrTimeout is the cause of a run's context when Timeout ends it.
	ErrTimeout = errors.New("jobs: timeout")
)

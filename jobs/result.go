package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// MaxResult is the longest result, in bytes, that a run may attach to its
// slot record.
const MaxResult = 1024

// ErrNoRun is returned by SetResult outside a run that the scheduler started.
var ErrNoRun = errors.New("jobs: not in a run the scheduler started")

type resultKey struct{}

type resultBox struct {
	mu     sync.Mutex
	result string
}

// CaptureResult returns a copy of ctx in which SetResult keeps a result, and
// a function that returns the last one kept. The scheduler calls it for
// every run, and records the result with the run's final state.
func CaptureResult(ctx context.Context) (context.Context, func() string) {
	box := &resultBox{}
	return context.WithValue(ctx, resultKey{}, box), func() string {
		box.mu.Lock()
		defer box.mu.Unlock()
		return box.result
	}
}

// SetResult attaches a short result to the run's slot record, shown by
// worker status: what the run did, in a line ("10 winners: ..."). A later
// call replaces it. A result over MaxResult bytes is refused, and the one
// set before stays.
func SetResult(ctx context.Context, result string) error {
	box, ok := ctx.Value(resultKey{}).(*resultBox)
	if !ok {
		return ErrNoRun
	}
	if len(result) > MaxResult {
		return fmt.Errorf("jobs: a result holds at most %d bytes, got %d", MaxResult, len(result))
	}
	box.mu.Lock()
	defer box.mu.Unlock()
	box.result = result
	return nil
}

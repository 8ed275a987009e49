package locking

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// deadlineOnly is a context whose deadline has passed while its Err is
// still nil: what a command sees when its connection's deadline (set from
// the context's) fires before the context's own timer does.
type deadlineOnly struct {
	context.Context
	at time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.at, true }

// TestAttemptCutOffByTheDeadlineSaysDeadlineExceeded: an attempt whose
// command timed out at the caller's deadline fails with
// context.DeadlineExceeded, as a wait that reaches the deadline does, not
// with the i/o timeout (seen in CI: TestRWPreferReadersStarvesWriter).
func TestAttemptCutOffByTheDeadlineSaysDeadlineExceeded(t *testing.T) {
	ioTimeout := &os.SyscallError{Syscall: "read", Err: os.ErrDeadlineExceeded}
	c := &Client{}
	ctx := deadlineOnly{context.Background(), time.Now().Add(-time.Millisecond)}
	if _, err := c.finish(ctx, nil, ioTimeout, options{}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an attempt cut off at the deadline: %v, want context.DeadlineExceeded", err)
	}
	// Before the deadline, an i/o timeout is Redis's (ReadTimeout), and says so.
	ctx.at = time.Now().Add(time.Hour)
	if _, err := c.finish(ctx, nil, ioTimeout, options{}, nil); !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an i/o timeout before the deadline: %v, want it as it is", err)
	}
}

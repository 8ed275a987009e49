// Package nap is a job that takes a while: each run waits Duration, or until
// its context ends, and then returns. The worker binary (cmd/worker)
// registers it as "nap" beside the lottery, whose runs take a millisecond, so
// that a deployment can watch a run's lease being renewed (the lease.renewed
// events on its trace) and lost mid-run: deploy/compose's stack test cuts a
// nap's owner off Redis and checks that the nap is woken, and that another
// replica takes the slot over.
//
// A nap woken early returns an error that says how long it slept and wraps
// the context's cause (slot.ErrLeaseLost when its lease was lost), so the
// slot's record and the owner's log say why it ended.
package nap

import (
	"context"
	"fmt"
	"time"

	"github.com/slotcron/slotcron/jobs"
)

// Name is the job's name in the cron table.
const Name = "nap"

// Duration is how long a run sleeps when nothing wakes it.
const Duration = 6 * time.Second

// New returns a job that sleeps d, or until its context ends. It blocks for
// that long; it returns nil after a full nap, else an error that wraps
// context.Cause(ctx).
func New(d time.Duration) jobs.Func {
	return func(ctx context.Context, run jobs.Run) error {
		began := time.Now()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("nap: woken after %v of %v: %w", time.Since(began).Round(time.Millisecond), d, context.Cause(ctx))
		}
	}
}

// Register adds a nap of Duration to reg under Name.
func Register(reg *jobs.Registry) error {
	return reg.Register(Name, New(Duration))
}

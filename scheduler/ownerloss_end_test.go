package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/validity"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestNoSilentDoneOnALeaseThatRanOutAtTheRunsEnd: renewals fail mid-run
// (the network is cut), and the job returns at the instant its lease runs
// out. Two things are then due at once: the job's return and the lease's
// timer; which runs first is the Go scheduler's choice. When the return
// came first, the run asked only whether its context had ended, found it
// had not, and sent its finish after the lease's end: Redis recorded the
// slot done, and no ERROR, lease_lost event or metric said the lease was
// lost, in about half the rounds. The run's end now asks whether the lease
// is still proven, as its start does, and the loss is reported; the job
// returned nil, so its slot is still recorded done. Found by review.
func TestNoSilentDoneOnALeaseThatRanOutAtTheRunsEnd(t *testing.T) {
	for i := range 30 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				ttl := 204040404 * time.Nanosecond // its SafeTTL is 200ms
				release := make(chan struct{})
				var mu sync.Mutex
				var r *replica
				at := nextSecond(0).Add(10 * time.Second).Truncate(10 * time.Second)
				fn := func(ctx context.Context, run jobs.Run) error {
					if !run.Slot.Equal(at) {
						return nil
					}
					mu.Lock()
					rr := r
					mu.Unlock()
					rr.net.freeze() // renewals fail from now on
					<-release
					return nil
				}
				events := &eventLog{}
				table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", LeaseTTL: ttl}}
				rep := h.start("r1", registry(t, map[string]jobs.Func{"j": fn}), table, events.option())
				mu.Lock()
				r = rep
				mu.Unlock()
				// The claim goes out 2ms before the slot, so the lease ends at
				// at+198ms: this timer and the lease's are due at one instant.
				sleepUntil(at.Add(validity.SafeTTL(ttl) - 2*time.Millisecond))
				close(release)
				sleepUntil(at.Add(time.Second))
				rep.net.thaw()
				sleepUntil(at.Add(3 * time.Second))
				rec, ok := h.record("j", at.Unix())
				if !ok {
					t.Fatal("the slot has no record")
				}
				if rec.State != slot.StateDone {
					t.Errorf("the job returned nil, yet its slot is recorded %s", rec.State)
				}
				if lost := events.of(t, scheduler.EventLeaseLost); len(lost) != 1 {
					t.Errorf("the lease ran out as the job returned: %d lease_lost events, want 1", len(lost))
				}
			})
		})
	}
}

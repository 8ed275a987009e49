package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// checkCounter counts the checks on running slots (takeover claims) that
// reach the claim script, by their answer.
type checkCounter struct {
	mu  sync.Mutex
	got map[slot.Outcome]int
}

func (c *checkCounter) wrap(s *slotstore.Store) scheduler.Claimer { return checkCountingClaimer{s, c} }

type checkCountingClaimer struct {
	*slotstore.Store
	c *checkCounter
}

func (cc checkCountingClaimer) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	res, err := cc.Store.Claim(ctx, claims)
	cc.c.mu.Lock()
	defer cc.c.mu.Unlock()
	for i, r := range res {
		if claims[i].Kind == slot.ClaimTakeover {
			cc.c.got[r.Outcome]++
		}
	}
	return res, err
}

// TestChecksReadBeforeTheyClaim: the replicas that lose a slot to a long run
// check on it when its owner's lease would lapse, and again while the owner
// holds it. A check whose slot has ended by then is settled by a read of the
// record: no takeover goes to the script to find it closed. Checks on slots
// still running do, and find the owner alive; every slot runs once.
func TestChecksReadBeforeTheyClaim(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		run := l.fn()
		long := func(ctx context.Context, r jobs.Run) error {
			run(ctx, r)
			select { // longer than the lease TTL: renewed meanwhile
			case <-time.After(3500 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}
		table := []scheduler.Job{{Name: "long", Schedule: "@every 10s", LeaseTTL: 2 * time.Second, Routing: scheduler.RoutingRace}}
		checks := &checkCounter{got: map[slot.Outcome]int{}}
		for _, id := range []string{"r1", "r2", "r3"} {
			h.startWith(id, replicaOpts{claimer: checks.wrap}, registry(t, map[string]jobs.Func{"long": long}), table)
		}
		from := nextSecond(0).Truncate(10 * time.Second).Add(20 * time.Second)
		to := from.Add(100 * time.Second)
		sleepUntil(to.Add(10 * time.Second))
		l.mu.Lock()
		for at := from; at.Before(to); at = at.Add(10 * time.Second) {
			if n := len(l.runs[at.Unix()]); n != 1 {
				t.Errorf("slot %v ran %d times, want once", at.UTC(), n)
			}
		}
		l.mu.Unlock()
		checks.mu.Lock()
		defer checks.mu.Unlock()
		if checks.got[slot.OutcomeAlive] == 0 || checks.got[slot.OutcomeClosed] != 0 || checks.got[slot.OutcomeGone] != 0 {
			t.Fatalf("takeover claims by answer: %v; want some alive (the slot was running) and none closed or gone (a read settles those)", checks.got)
		}
	})
}

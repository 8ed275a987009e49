package scheduler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// cutClaimer runs the first claim in Redis, then calls cut (the operator's
// Ctrl-C), and drops the claim's answer when the context it was sent on
// ended meanwhile, as go-redis does with a reply it was no longer waiting
// for.
type cutClaimer struct {
	*slotstore.Store
	once sync.Once
	cut  func()
}

func (c *cutClaimer) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return c.Store.Claim(ctx, claims)
	}
	res, err := c.Store.Claim(context.WithoutCancel(ctx), claims)
	c.cut()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, err
}

// TestAStopDoesNotCutOffABackfillsClaimInFlight: the operator stops a
// backfill (Ctrl-C) while its claim is in flight (Redis slow or frozen).
// Redis runs the claim, and the slot is recorded running by the backfill;
// the answer must still be applied, as the run loop's claims are
// (TestAStopDoesNotCutOffAClaimInFlight): the run starts within the
// shutdown grace. Before, the answer was dropped with the context, the slot
// stayed running with no run behind it, and a live replica recorded it
// abandoned a minute later: a slot that never ran, which no backfill fills
// again. Found by review.
func TestAStopDoesNotCutOffABackfillsClaimInFlight(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := "starts"
		table := []scheduler.Job{{Name: "report", Schedule: "@every 1s", LeaseTTL: time.Second}}
		fns := map[string]jobs.Func{"report": recorder(h.rdb, key, 10*time.Millisecond)}
		at := time.Now().Add(-5 * time.Second).Truncate(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := scheduler.New(&cutClaimer{Store: h.store, cut: cancel}, registry(t, fns), scheduler.WithJobs(table...),
			scheduler.WithReplicaID("cli"), scheduler.WithShutdownGrace(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Backfill(ctx, "report", []time.Time{at}, 1)
		t.Logf("Backfill: %+v, %v", out, err)
		time.Sleep(10 * time.Second)
		rec, ok := h.record("report", at.Unix())
		starts := 0
		for _, st := range h.starts(key) {
			if st.slot == at.Unix() {
				starts++
			}
		}
		if !ok || rec.State != slot.StateDone || starts != 1 {
			t.Errorf("the slot whose claim was in flight at the stop: record %s %q (found %v), %d starts; want done, once", rec.State, rec.Error, ok, starts)
		}
	})
}

// TestAPauseStopsABackfill: the job is paused while a backfill runs (its
// first run pauses it). The backfill's next claim records its slot paused;
// it must claim no more, leaving the rest of its slots with no record (a
// backfill after the resume runs them), and say that it stopped. Before, it
// recorded every remaining slot paused, which no backfill runs again, and
// returned no error (the command exited 0). Found by review.
func TestAPauseStopsABackfill(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := "starts"
		table := []scheduler.Job{{Name: "report", Schedule: "@every 1s", LeaseTTL: time.Second}}
		rec := recorder(h.rdb, key, 10*time.Millisecond)
		fns := map[string]jobs.Func{"report": func(ctx context.Context, run jobs.Run) error {
			if _, _, err := h.store.Pause(ctx, "report", "hold on", "ops"); err != nil {
				return err
			}
			return rec(ctx, run)
		}}
		first := time.Now().Add(-5 * time.Second).Truncate(time.Second)
		slots := []time.Time{first, first.Add(time.Second), first.Add(2 * time.Second)}
		fresh := func() *scheduler.Scheduler { // a Scheduler backfills once
			s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		out, err := fresh().Backfill(context.Background(), "report", slots, 1)
		if err == nil || !strings.Contains(err.Error(), "paused") {
			t.Errorf("Backfill's error: %v, want one that says the job was paused", err)
		}
		if len(out) != 3 || out[0].Outcome != slot.OutcomeWon || out[1].Outcome != slot.OutcomePaused || out[2].Outcome != "" {
			t.Fatalf("Backfill: %+v; want the first run, the second recorded paused, the third not reached", out)
		}
		if r, ok := h.record("report", slots[2].Unix()); ok {
			t.Errorf("the slot after the pause: recorded %s %q; want no record, for a backfill after the resume", r.State, r.Error)
		}
		// Paused on its last slot: no slot is left unreached, but that one
		// is recorded paused for good, and the backfill must say so too.
		if _, err := h.store.Resume(context.Background(), "report"); err != nil {
			t.Fatal(err)
		}
		out, err = fresh().Backfill(context.Background(), "report", []time.Time{slots[2]}, 1)
		if err != nil || len(out) != 1 || out[0].Outcome != slot.OutcomeWon {
			t.Fatalf("the backfill after the resume: %+v, %v; want its slot run", out, err)
		}
		last := []time.Time{first.Add(3 * time.Second), first.Add(4 * time.Second)}
		if _, err := h.store.Resume(context.Background(), "report"); err != nil {
			t.Fatal(err)
		}
		out, err = fresh().Backfill(context.Background(), "report", last, 1)
		if err == nil || len(out) != 2 || out[1].Outcome != slot.OutcomePaused {
			t.Errorf("a backfill paused at its last slot: %+v, %v; want that slot recorded paused, and an error", out, err)
		}
	})
}

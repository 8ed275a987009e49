package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestBackfillRunsMissedSlots: every replica is down for 5 slots of a job
// whose catch-up is none, so the replicas that start again record them
// missed (no run of them started). Two backfills of the outage and the two
// slots before it, at once, beside the live replicas, run each missed slot
// exactly once, and each ends done, by one of the backfills; the slots that
// ran before the outage are left alone. Before, a backfill ran only slots
// with no record, and ran none of these.
func TestBackfillRunsMissedSlots(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const down, key = 5, "starts"
		ctx := context.Background()
		// A max_skew of 100ms keeps the slots of the outage in catch-up's
		// hands at the restart (see TestCatchup).
		skew := scheduler.WithSkewLimits(50*time.Millisecond, 100*time.Millisecond)
		table := []scheduler.Job{{Name: "report", Schedule: "@every 1s", Catchup: scheduler.CatchupNone, LeaseTTL: time.Second, MisfireGrace: time.Second}}
		fns := map[string]jobs.Func{"report": recorder(h.rdb, key, 10*time.Millisecond)}
		last := h.ranThenStopped("r0", registry(t, fns), table, 2500*time.Millisecond, skew)
		sleepUntil(time.Unix(last+down, 0).Add(500 * time.Millisecond))
		for i := range 2 {
			h.start(fmt.Sprintf("again%d", i), registry(t, fns), table, skew)
		}
		time.Sleep(2 * time.Second)
		for at := last + 1; at <= last+down; at++ {
			if rec, ok := h.record("report", at); !ok || rec.State != slot.StateMissed || !strings.HasPrefix(rec.Owner, "again") {
				t.Fatalf("slot %d of the outage: %+v (%v); want recorded missed by a replica that started again", at, rec, ok)
			}
		}

		var slots []time.Time
		for at := last - 1; at <= last+down; at++ {
			slots = append(slots, time.Unix(at, 0))
		}
		results := make([][]scheduler.BackfillSlot, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID(fmt.Sprintf("cli%d", i)), skew)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = s.Backfill(ctx, "report", slots, 1+i)
			}()
		}
		wg.Wait()
		for i := range 2 {
			if errs[i] != nil || len(results[i]) != len(slots) {
				t.Fatalf("backfill %d: %+v, %v", i, results[i], errs[i])
			}
		}

		starts := map[int64][]string{}
		for _, s := range h.starts(key) {
			starts[s.slot] = append(starts[s.slot], s.replica)
		}
		for k, at := range slots {
			rec, _ := h.record("report", at.Unix())
			won := 0
			for i := range 2 {
				if r := results[i][k]; r.Err != nil {
					t.Errorf("backfill %d, slot %d: %v", i, at.Unix(), r.Err)
				} else if r.Outcome == slot.OutcomeWon {
					won++
					if r.State != slot.StateDone || rec.Owner != fmt.Sprintf("cli%d", i) {
						t.Errorf("backfill %d won slot %d: %+v, record %+v; want done, its record its own", i, at.Unix(), r, rec)
					}
				} else if r.Outcome != slot.OutcomeLost {
					t.Errorf("backfill %d, slot %d: %+v; want won or lost", i, at.Unix(), r)
				}
			}
			if at.Unix() <= last { // ran before the outage
				if won != 0 || len(starts[at.Unix()]) != 1 || starts[at.Unix()][0] != "r0" || rec.State != slot.StateDone || rec.Owner != "r0" {
					t.Errorf("slot %d ran before the outage: the backfills won it %d times, it started on %v, record %+v; want left alone", at.Unix(), won, starts[at.Unix()], rec)
				}
				continue
			}
			if won != 1 || len(starts[at.Unix()]) != 1 || !strings.HasPrefix(starts[at.Unix()][0], "cli") || rec.State != slot.StateDone || rec.Attempt != 1 {
				t.Errorf("slot %d, recorded missed: the backfills won it %d times, it started on %v, record %+v; want once, done by a backfill", at.Unix(), won, starts[at.Unix()], rec)
			}
		}
	})
}

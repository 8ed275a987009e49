package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestCatchup stops every replica for 5 slots, restarts them together, and
// checks what each catch-up policy made of the 5 missed slots. Each policy
// runs in its own bubble.
func TestCatchup(t *testing.T) {
	const replicas, down = 3, 5
	for _, p := range []scheduler.Catchup{scheduler.CatchupNone, scheduler.CatchupLast, scheduler.CatchupAll} {
		t.Run(string(p), func(t *testing.T) {
			bubble(t, func(t *testing.T, e *harness) {
				// A max_skew of 100ms keeps the slots older than 100ms at restart
				// in catch-up's hands; the default 2s would claim the last two live.
				skew := scheduler.WithSkewLimits(50*time.Millisecond, 100*time.Millisecond)
				key := "starts"
				// A misfire grace of 1s: a slot the policy does not run is
				// recorded missed once its grace has passed on Redis's clock
				// (a lagging replica may claim it until then), within the
				// 2s this test waits.
				table := []scheduler.Job{{Name: "report", Schedule: "@every 1s", Catchup: p, LeaseTTL: time.Second, MisfireGrace: time.Second}}
				fns := map[string]jobs.Func{"report": recorder(e.rdb, key, 10*time.Millisecond)}
				var running []*replica
				for r := range replicas {
					running = append(running, e.start(fmt.Sprintf("r%d", r), registry(t, fns), table, skew))
				}
				time.Sleep(2500 * time.Millisecond) // a few slots run
				for _, r := range running {
					r.stop()
				}
				states, err := e.store.JobStates(context.Background(), []string{"report"})
				if err != nil || states["report"].Last.IsZero() {
					t.Fatalf("no slot ran before the stop: %v %v", states, err)
				}
				last := states["report"].Last.Unix()
				// Restart when exactly `down` slots have passed unclaimed: at
				// last+down+0.5s, slots last+1..last+down are older than max_skew,
				// last+down+1 is live.
				sleepUntil(time.Unix(last+down, 0).Add(500 * time.Millisecond))
				for r := range replicas {
					e.start(fmt.Sprintf("again%d", r), registry(t, fns), table, skew)
				}
				time.Sleep(2 * time.Second)

				starts := map[int64]int{}
				for _, s := range e.starts(key) {
					starts[s.slot]++
				}
				ran := 0
				for at := last + 1; at <= last+down; at++ {
					rec, ok := e.record("report", at)
					if !ok {
						t.Errorf("slot %d has no record", at)
						continue
					}
					want, wantState := 0, slot.StateMissed
					if p == scheduler.CatchupAll || p == scheduler.CatchupLast && at == last+down {
						want, wantState = 1, slot.StateDone
					}
					if starts[at] != want || rec.State != wantState {
						t.Errorf("slot %d: %d starts, record %s (%q); want %d starts, %s", at, starts[at], rec.State, rec.Error, want, wantState)
					}
					ran += starts[at]
				}
				t.Logf("catchup %s: %d of %d missed slots ran", p, ran, down)
				// Live slots after the restart run as usual.
				if starts[last+down+1] != 1 {
					t.Errorf("the first live slot after the restart started %d times", starts[last+down+1])
				}
			})
		})
	}
}

// TestBackfillIsChecked: Backfill is for past slots of the job's schedule
// that no replica ran. A slot in the future (its replicas run it at its
// time: run now, it would close that slot early), a time that is not one
// of the schedule's, or one older than the retention (its record may have
// expired: a slot that ran would run again) is refused, before anything is
// claimed, with an error that names it.
func TestBackfillIsChecked(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "0 * * * *", Retention: 48 * time.Hour}}
		fns := map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}
		time.Sleep(72 * time.Hour)
		hour := time.Now().Truncate(time.Hour)
		for i, tc := range []struct {
			at   time.Time
			want string
		}{
			{hour.Add(time.Hour), "is in the future"},
			{hour.Add(-time.Hour + 17*time.Minute), `is not a time of the schedule "0 * * * *"`},
			{hour.Add(-time.Hour + 500*time.Millisecond), `is not a time of the schedule "0 * * * *"`},
			{hour.Add(-49 * time.Hour), "older than the job's retention (48h0m0s)"},
		} {
			s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
			if err != nil {
				t.Fatal(err)
			}
			ok := hour.Add(-time.Duration(2+i) * time.Hour) // with a good slot first: nothing is claimed, not even it
			res, err := s.Backfill(context.Background(), "j", []time.Time{ok, tc.at}, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.at.UTC().Format(time.RFC3339Nano)) {
				t.Errorf("Backfill of %v: %+v, %v; want an error naming it: %q", tc.at.UTC(), res, err, tc.want)
			}
			for _, at := range []time.Time{ok, tc.at} {
				if rec, found := h.record("j", at.Unix()); found {
					t.Errorf("Backfill of %v refused, but slot %v has a record: %+v", tc.at.UTC(), at.UTC(), rec)
				}
			}
		}
		s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
		if err != nil {
			t.Fatal(err)
		}
		ok := []time.Time{hour.Add(-47 * time.Hour), hour}
		if res, err := s.Backfill(context.Background(), "j", ok, 1); err != nil || len(res) != 2 || res[0].State != slot.StateDone || res[1].State != slot.StateDone {
			t.Errorf("Backfill of %v (within the retention, and the current slot): %+v, %v; want both run, done", ok, res, err)
		}
	})
}

package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
)

// TestCatchup stops every replica for 5 slots, restarts them together, and
// checks what each catch-up policy made of the 5 missed slots. The three
// policies run side by side, each on its own Redis.
func TestCatchup(t *testing.T) {
	const replicas, down = 3, 5
	policies := []scheduler.Catchup{scheduler.CatchupNone, scheduler.CatchupLast, scheduler.CatchupAll}
	type world struct {
		e       *env
		key     string
		table   []scheduler.Job
		fns     map[string]jobs.Func
		running []*replica
	}
	// A max_skew of 100ms keeps the slots older than 100ms at restart in
	// catch-up's hands; the default 2s would claim the last two live.
	skew := scheduler.WithSkewLimits(50*time.Millisecond, 100*time.Millisecond)
	worlds := make([]*world, len(policies))
	for i, p := range policies {
		e := newEnv(t)
		w := &world{e: e, key: e.srv.Key("starts")}
		w.table = []scheduler.Job{{Name: "report", Schedule: "@every 1s", Catchup: p, LeaseTTL: time.Second}}
		w.fns = map[string]jobs.Func{"report": recorder(e.rdb, w.key, 10*time.Millisecond)}
		for r := range replicas {
			w.running = append(w.running, e.start(fmt.Sprintf("r%d", r), "", registry(t, w.fns), w.table, skew))
		}
		worlds[i] = w
	}
	time.Sleep(2500 * time.Millisecond) // a few slots run
	last := make([]int64, len(worlds))
	for i, w := range worlds {
		for _, r := range w.running {
			r.stop()
		}
		slots, _ := locking.NewSlots(w.e.rdb, w.e.prefix)
		lasts, err := slots.LastSlots(context.Background(), []string{"report"})
		if err != nil || lasts["report"].IsZero() {
			t.Fatalf("no slot ran before the stop: %v %v", lasts, err)
		}
		last[i] = lasts["report"].Unix()
	}
	// Restart when exactly `down` slots have passed unclaimed: at last+down+0.5s,
	// slots last+1..last+down are older than max_skew, last+down+1 is live.
	restart := time.Unix(last[0]+down, 0).Add(500 * time.Millisecond)
	for i := range worlds {
		if last[i] != last[0] {
			t.Fatalf("the worlds stopped at different slots: %v", last)
		}
	}
	sleepUntil(restart)
	for _, w := range worlds {
		for r := range replicas {
			w.e.start(fmt.Sprintf("again%d", r), "", registry(t, w.fns), w.table, skew)
		}
	}
	time.Sleep(2 * time.Second)

	for i, p := range policies {
		t.Run(string(p), func(t *testing.T) {
			w := worlds[i]
			starts := map[int64]int{}
			for _, s := range w.e.starts(w.key) {
				starts[s.slot]++
			}
			ran := 0
			for slot := last[i] + 1; slot <= last[i]+down; slot++ {
				rec, ok := w.e.record("report", slot)
				if !ok {
					t.Errorf("slot %d has no record", slot)
					continue
				}
				want, wantState := 0, locking.StateMissed
				if p == scheduler.CatchupAll || p == scheduler.CatchupLast && slot == last[i]+down {
					want, wantState = 1, locking.StateDone
				}
				if starts[slot] != want || rec.State != wantState {
					t.Errorf("slot %d: %d starts, record %s (%q); want %d starts, %s", slot, starts[slot], rec.State, rec.Error, want, wantState)
				}
				ran += starts[slot]
			}
			t.Logf("catchup %s: %d of %d missed slots ran", p, ran, down)
			// Live slots after the restart run as usual.
			if starts[last[i]+down+1] != 1 {
				t.Errorf("the first live slot after the restart started %d times", starts[last[i]+down+1])
			}
		})
	}
}

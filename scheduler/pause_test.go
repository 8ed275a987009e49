package scheduler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestPauseStopsEveryReplica: three replicas run a job every second. Paused
// between two ticks, the job runs on no replica from the next tick on, and
// each of its slots is recorded paused, with the note; resumed, it runs
// again from the next tick.
func TestPauseStopsEveryReplica(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := h.prefix + ":starts"
		fns := map[string]jobs.Func{"tick": recorder(h.rdb, key, 10*time.Millisecond)}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		for _, id := range []string{"a", "b", "c"} {
			h.start(id, registry(t, fns), table)
		}
		first := nextSecond(0)
		sleepUntil(first.Add(2500 * time.Millisecond)) // slots first .. first+2 run
		if _, _, err := h.store.Pause(context.Background(), "tick", "migration", "ops@host"); err != nil {
			t.Fatal(err)
		}
		sleepUntil(first.Add(5500 * time.Millisecond)) // slots +3 .. +5 are paused
		if _, err := h.store.Resume(context.Background(), "tick"); err != nil {
			t.Fatal(err)
		}
		sleepUntil(first.Add(7500 * time.Millisecond)) // +6 and +7 run
		synctest.Wait()

		ran := map[int64]int{}
		for _, s := range h.starts(key) {
			ran[s.slot]++
		}
		for i := int64(0); i <= 7; i++ {
			at := first.Unix() + i
			rec, ok := h.record("tick", at)
			paused := i >= 3 && i <= 5
			switch {
			case paused && (ran[at] != 0 || !ok || rec.State != slot.StatePaused || rec.Error != "paused by ops@host: migration"):
				t.Errorf("slot +%d, paused: %d starts, record %+v", i, ran[at], rec)
			case !paused && (ran[at] != 1 || !ok || rec.State != slot.StateDone):
				t.Errorf("slot +%d: %d starts, record %+v", i, ran[at], rec)
			}
		}
	})
}

package scheduler_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// lastRan runs the table on one replica for a few slots, stops it, and
// returns the job's latest recorded slot (unix s).
func lastRan(t *testing.T, h *harness, job string, reg *jobs.Registry, table []scheduler.Job) int64 {
	t.Helper()
	r := h.start("before", reg, table)
	time.Sleep(25 * time.Second)
	r.stop()
	states, err := h.store.JobStates(context.Background(), []string{job})
	if err != nil || states[job].Last.IsZero() {
		t.Fatalf("no slot ran before the outage: %v %v", states, err)
	}
	return states[job].Last.Unix()
}

// TestSlotsOlderThanTheWindowAreRecorded: every replica was down for 20
// minutes; the job runs every 10 s with a catch-up window of 1 minute and
// a retention of 10 minutes. The slots in the window follow the catch-up
// policy; the older ones after the job's last record are recorded missed,
// saying they were older than the window, back to the retention (less
// max_skew): older ones would have lost their record by now anyway. Those
// are not recorded, and a WARN says how many. Before, no slot older than
// the window got a record, and the next start planned from later slots: 113
// slots of the outage ended with none, and nothing said so.
func TestSlotsOlderThanTheWindowAreRecorded(t *testing.T) {
	for _, p := range []scheduler.Catchup{scheduler.CatchupNone, scheduler.CatchupLast, scheduler.CatchupAll} {
		t.Run(string(p), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", Catchup: p, CatchupWindow: time.Minute,
					Retention: 10 * time.Minute, MisfireGrace: 5 * time.Second, LeaseTTL: 2 * time.Second}}
				reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}) }
				last := lastRan(t, h, "j", reg(), table)
				// Back 20 minutes and 5 s later: max_skew is 2 s, so slots
				// up to last+1200 are past, last+1150..last+1200 are in
				// the window, and last+610..last+1140 are older than it but
				// within the retention less max_skew (start-602s).
				start := time.Unix(last+1205, 0)
				sleepUntil(start)
				var buf lines
				h.start("r1", reg(), table, scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
				time.Sleep(30 * time.Second)

				starts := map[int64]int{}
				for _, s := range h.starts("starts") {
					starts[s.slot]++
				}
				for at := last + 610; at <= last+1200; at += 10 {
					rec, ok := h.record("j", at)
					var want slot.State
					switch {
					case at <= last+1140:
						want = slot.StateMissed
						if ok && !strings.Contains(rec.Error, "older than the catch-up window") {
							t.Errorf("slot %d, older than the window: missed %q; want the reason to say so", at, rec.Error)
						}
					case p == scheduler.CatchupAll, p == scheduler.CatchupLast && at == last+1200:
						want = slot.StateDone
					default:
						want = slot.StateMissed
					}
					switch {
					case !ok:
						t.Errorf("slot %d (start%+ds) ended with no record", at, at-start.Unix())
					case rec.State != want:
						t.Errorf("slot %d: %s %q; want %s", at, rec.State, rec.Error, want)
					}
					if n := map[bool]int{true: 1}[want == slot.StateDone]; starts[at] != n {
						t.Errorf("slot %d started %d times; want %d", at, starts[at], n)
					}
				}
				// last+10 .. last+600: past the retention less max_skew, left
				// alone (60 slots), and said so.
				for at := last + 10; at <= last+600; at += 10 {
					if rec, ok := h.record("j", at); ok {
						t.Errorf("slot %d, older than the retention: recorded %s; want none", at, rec.State)
					}
				}
				found := false
				for _, l := range buf.all() {
					if strings.Contains(l, "level=WARN") && strings.Contains(l, "past_retention=60 ") {
						found = true
					}
				}
				if !found {
					t.Errorf("no WARN counts the 60 slots past the retention:\n%s", strings.Join(buf.all(), "\n"))
				}
			})
		})
	}
}

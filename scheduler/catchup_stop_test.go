package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// catchupOutage runs the table for a few slots, then leaves every replica
// down for 100 s: the job (every 10 s, catchup all, each run 25 s, overlap
// allow) has 10 slots to catch up, last+10..last+100, when replicas start
// at the returned time, last+105.
func catchupOutage(t *testing.T, h *harness) (last int64, table []scheduler.Job, reg func() *jobs.Registry) {
	table = []scheduler.Job{{Name: "j", Schedule: "@every 10s", Catchup: scheduler.CatchupAll, CatchupWindow: 10 * time.Minute,
		Overlap: scheduler.OverlapAllow, LeaseTTL: 2 * time.Second, MisfireGrace: 5 * time.Second}}
	reg = func() *jobs.Registry {
		return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 25*time.Second)})
	}
	last = lastRan(t, h, "j", reg(), table)
	time.Sleep(time.Minute) // the last runs end
	sleepUntil(time.Unix(last+105, 0))
	return last, table, reg
}

// caughtUp checks the catch-up slots last+10..last+100 once every replica
// has stopped: each has a record, and none is still running; it returns
// how many ran (done) and how many were recorded missed as a replica
// stopped before its catch-up reached them.
func caughtUp(t *testing.T, h *harness, last int64) (done, stopped int) {
	t.Helper()
	starts := map[int64]int{}
	for _, s := range h.starts("starts") {
		starts[s.slot]++
	}
	for at := last + 10; at <= last+100; at += 10 {
		rec, ok := h.record("j", at)
		switch {
		case !ok:
			t.Errorf("slot %d, in the catch-up, ended with no record", at)
		case starts[at] > 1:
			t.Errorf("slot %d started %d times", at, starts[at])
		case rec.State == slot.StateDone && starts[at] == 1:
			done++
		case rec.State == slot.StateMissed && starts[at] == 0 && strings.Contains(rec.Error, "stopped before its catch-up reached it"):
			stopped++
		default:
			t.Errorf("slot %d: %s %q, %d starts", at, rec.State, rec.Error, starts[at])
		}
	}
	return done, stopped
}

// TestStopRecordsTheUnreachedCatchup: after an outage, one replica catches
// up 10 slots (catchup all), one at a time, and is stopped 40 s in, with 8
// slots still to go. The job's state already holds the live slots that ran
// meanwhile, so no later start would plan those 8: they must be recorded
// missed as it stops, saying why. Before, they kept no record.
func TestStopRecordsTheUnreachedCatchup(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		last, table, reg := catchupOutage(t, h)
		metrics := sdkmetric.NewManualReader()
		r1 := h.start("r1", reg(), table, scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
		time.Sleep(40 * time.Second)
		r1.stop()
		done, stopped := caughtUp(t, h, last)
		if done < 1 || stopped < 5 {
			t.Errorf("%d catch-up slots ran, %d recorded missed at the stop; want the first to run, and at least 5 left at the stop", done, stopped)
		}
		if n := claimsOf(t, metrics, "missed"); n != int64(stopped) {
			t.Errorf("slotcron.claims{outcome=missed}: %d; want the %d slots recorded at the stop", n, stopped)
		}
		t.Logf("%d catch-up slots ran, %d recorded missed at the stop", done, stopped)
	})
}

// TestStopLeavesTheCatchupToAPeer: two replicas start together after the
// outage: both planned the same catch-up. One stops 30 s in; the other goes
// on and runs every slot of it: the stopping replica must not record missed
// the slots its live peer is about to run.
func TestStopLeavesTheCatchupToAPeer(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		last, table, reg := catchupOutage(t, h)
		r1 := h.start("r1", reg(), table)
		h.start("r2", reg(), table)
		time.Sleep(30 * time.Second)
		r1.stop()
		time.Sleep(5 * time.Minute) // r2 runs the rest, one at a time
		if done, stopped := caughtUp(t, h, last); done != 10 || stopped != 0 {
			t.Errorf("%d catch-up slots ran, %d recorded missed at r1's stop; want all 10 run, by r2 after the stop", done, stopped)
		}
	})
}

// TestStopDoesNotCountOnALaterPeer: r2 starts 20 s after r1, once live
// slots have run: it planned from them, and holds none of the catch-up.
// r1, stopping mid catch-up, must record the rest missed, not leave it to
// r2.
func TestStopDoesNotCountOnALaterPeer(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		last, table, reg := catchupOutage(t, h)
		r1 := h.start("r1", reg(), table)
		time.Sleep(20 * time.Second)
		h.start("r2", reg(), table)
		time.Sleep(20 * time.Second)
		r1.stop()
		time.Sleep(time.Minute)
		if done, stopped := caughtUp(t, h, last); stopped < 5 {
			t.Errorf("%d catch-up slots ran, %d recorded missed at r1's stop; want at least 5 left at the stop", done, stopped)
		}
	})
}

// TestStopTogetherRecordsTheCatchup: two replicas that planned the same
// catch-up stop at the same moment, each able to count on the other: each
// leaves the registry before it reads who is still live, so the last to
// leave records what is left.
func TestStopTogetherRecordsTheCatchup(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		last, table, reg := catchupOutage(t, h)
		r1 := h.start("r1", reg(), table)
		r2 := h.start("r2", reg(), table)
		time.Sleep(30 * time.Second)
		done := make(chan struct{})
		go func() { r1.stop(); close(done) }()
		r2.stop()
		<-done
		ran, stopped := caughtUp(t, h, last)
		if stopped < 4 {
			t.Errorf("%d catch-up slots ran, %d recorded missed at the stop; want at least 4 left at the stop", ran, stopped)
		}
		t.Logf("%d ran, %d recorded missed at the stop", ran, stopped)
	})
}

// claimsOf sums slotcron.claims{outcome} collected by reader.
func claimsOf(t *testing.T, reader sdkmetric.Reader, outcome string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "slotcron.claims" {
				for _, dp := range sum.DataPoints {
					if v, _ := dp.Attributes.Value("outcome"); v.AsString() == outcome {
						n += dp.Value
					}
				}
			}
		}
	}
	return n
}

package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// ended is how a run's context ended, as the job saw it.
type ended struct {
	run   jobs.Run
	at    time.Time
	cause error
}

// untilCancelled is a job that records its start, then runs until its context
// ends and reports how.
func untilCancelled(e *harness, key string, out chan<- ended) jobs.Func {
	rec := recorder(e.rdb, key, time.Hour)
	return func(ctx context.Context, run jobs.Run) error {
		err := rec(ctx, run)
		out <- ended{run, time.Now(), context.Cause(ctx)}
		return err
	}
}

// counter sums an Int64 counter collected by reader.
func counter(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range sum.DataPoints {
					total += dp.Value
				}
			}
		}
	}
	return total
}

// TestOwnerLoss freezes the network between the winner and Redis in the
// middle of a run. The winner's renewals stop getting through; its job's
// context must end within one lease TTL, with cause ErrLeaseLost. Then the
// other replicas settle the slot by the job's policy.
func TestOwnerLoss(t *testing.T) {
	const ttl = time.Second
	for _, policy := range []scheduler.OwnerLost{scheduler.OwnerLostRetry, scheduler.OwnerLostAbandon} {
		t.Run(string(policy), func(t *testing.T) {
			bubble(t, func(t *testing.T, e *harness) { testOwnerLoss(t, e, policy, ttl) })
		})
	}
}

func testOwnerLoss(t *testing.T, e *harness, policy scheduler.OwnerLost, ttl time.Duration) {
	key := "starts"
	out := make(chan ended, 100)
	job := scheduler.Job{Name: "long", Schedule: "@every 1s", LeaseTTL: ttl, OnOwnerLost: policy}
	if policy == scheduler.OwnerLostRetry {
		job.MaxAttempts = 3
	}
	reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"long": untilCancelled(e, key, out)}) }
	grace := scheduler.WithShutdownGrace(100 * time.Millisecond)
	events := &eventLog{}

	// The winner starts alone and takes the first slot. Its spans and metrics
	// are kept in memory.
	spans := tracetest.NewSpanRecorder()
	metrics := sdkmetric.NewManualReader()
	winner := e.start("winner", reg(), []scheduler.Job{job}, grace, events.option(),
		scheduler.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
		scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
	time.Sleep(10 * time.Millisecond)
	if n := len(e.starts(key)); n != 1 {
		t.Fatalf("the winner started %d runs, want 1", n)
	}
	first := e.starts(key)[0]
	// The others start; the run holds the job, so they skip and watch it.
	e.start("b", reg(), []scheduler.Job{job}, grace, events.option())
	e.start("c", reg(), []scheduler.Job{job}, grace, events.option())
	time.Sleep(1500 * time.Millisecond)

	frozen := time.Now()
	winner.net.freeze()
	var lost ended
	select {
	case lost = <-out:
	case <-time.After(3 * ttl):
		t.Fatal("the winner's job context did not end after its network froze")
	}
	took := lost.at.Sub(frozen)
	t.Logf("winner's context ended %v after the freeze: %v", took, lost.cause)
	if lost.run.Replica != "winner" || !errors.Is(lost.cause, slot.ErrLeaseLost) || !errors.Is(lost.cause, locking.ErrLeaseLost) {
		t.Fatalf("ended: %+v, want the winner's run with cause ErrLeaseLost", lost)
	}
	if took > ttl {
		t.Fatalf("the job's context ended %v after the freeze, more than one lease TTL (%v)", took, ttl)
	}
	// The loss is on the run's span and in the metrics, though no renewal
	// ever answered: the TTL ran out locally.
	synctest.Wait()
	var marked bool
	for _, s := range spans.Ended() {
		for _, ev := range s.Events() {
			marked = marked || s.Name() == "job.run" && ev.Name == "lease.lost"
		}
	}
	if !marked {
		t.Fatal("no job.run span with a lease.lost event")
	}
	if n := counter(t, metrics, "slotcron.lease_lost"); n != 1 {
		t.Fatalf("slotcron.lease_lost = %d, want 1", n)
	}
	if ll := events.of(t, scheduler.EventLeaseLost); len(ll) != 1 || ll[0].Replica != "winner" || ll[0].Slot.Unix() != first.slot ||
		ll[0].RunID != lost.run.RunID || ll[0].Fence != first.fence {
		t.Fatalf("lease_lost events: %+v", ll)
	}

	time.Sleep(3 * ttl) // the others settle the slot
	switch policy {
	case scheduler.OwnerLostRetry:
		var second *start
		for _, s := range e.starts(key) {
			if s.slot == first.slot && s.attempt == 2 {
				second = &s
			}
		}
		if second == nil || second.replica == "winner" || second.fence <= first.fence {
			t.Fatalf("attempt 2: %+v after attempt 1 %+v; want another replica and a larger fence", second, first)
		}
		rec, _ := e.record("long", first.slot)
		if rec.State != slot.StateRunning || rec.Attempt != 2 || rec.Owner != second.replica {
			t.Fatalf("record %+v", rec)
		}
	case scheduler.OwnerLostAbandon:
		rec, _ := e.record("long", first.slot)
		if rec.State != slot.StateAbandoned {
			t.Fatalf("record %+v, want abandoned", rec)
		}
		// Reported once, by the replica that recorded it.
		ab := events.of(t, scheduler.EventAbandoned)
		if len(ab) != 1 || ab[0].Slot.Unix() != first.slot || ab[0].Replica == "winner" || ab[0].Attempt != 1 {
			t.Fatalf("abandoned events: %+v", ab)
		}
		time.Sleep(2 * ttl) // nobody runs it again
		for _, s := range e.starts(key) {
			if s.slot == first.slot && s.attempt != 1 {
				t.Fatalf("an abandoned slot ran again: %+v", s)
			}
		}
	}
	winner.net.thaw()
}

// TestALostAbandonIsReported: the replica that records a slot abandoned
// (its owner lost its lease) loses the reply, and sends its takeover again.
// The abandon is its own: it must be reported (the event, the WARN, the
// claims metric's "abandoned"), once, though the record is no longer
// running when the takeover is sent again. No other replica reports it.
func TestALostAbandonIsReported(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const ttl = time.Second
		key := "starts"
		out := make(chan ended, 100)
		job := scheduler.Job{Name: "long", Schedule: "@every 1s", LeaseTTL: ttl}
		reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"long": untilCancelled(h, key, out)}) }
		grace := scheduler.WithShutdownGrace(100 * time.Millisecond)
		events := &eventLog{}
		winner := h.start("winner", reg(), []scheduler.Job{job}, grace, events.option())
		time.Sleep(10 * time.Millisecond)
		if n := len(h.starts(key)); n != 1 {
			t.Fatalf("the winner started %d runs, want 1", n)
		}
		first := h.starts(key)[0]
		var drops []*dropWin
		var logs lines
		for _, id := range []string{"b", "c"} {
			h.startWith(id, replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer {
				d := &dropWin{Store: s, outcome: slot.OutcomeAbandoned, armed: true}
				drops = append(drops, d)
				return d
			}}, reg(), []scheduler.Job{job}, grace, events.option(),
				scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", id)))
		}
		time.Sleep(1500 * time.Millisecond)
		winner.net.freeze()
		time.Sleep(10 * ttl)
		if rec, ok := h.record("long", first.slot); !ok || rec.State != slot.StateAbandoned {
			t.Fatalf("the first slot's record: %+v (found %v); want abandoned", rec, ok)
		}
		dropped := 0
		for _, d := range drops {
			if d.hasDropped() {
				dropped++
			}
		}
		if dropped != 1 {
			t.Fatalf("%d replicas lost the reply of their abandon, want 1: the test shows nothing", dropped)
		}
		if ab := events.of(t, scheduler.EventAbandoned); len(ab) != 1 || ab[0].Slot.Unix() != first.slot || ab[0].Replica == "winner" {
			t.Fatalf("abandoned events: %+v; want one, from the replica that recorded it", ab)
		}
		warned := 0
		for _, l := range logs.all() {
			if strings.Contains(l, `msg="slot abandoned: its owner lost its lease"`) {
				warned++
			}
		}
		if warned != 1 {
			t.Fatalf("%d WARN lines of the abandon, want 1:\n%s", warned, strings.Join(logs.all(), "\n"))
		}
	})
}

package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
	var total int64
	for _, n := range counterBy(t, reader, name, "") {
		total += n
	}
	return total
}

// counterBy sums an Int64 counter collected by reader by the value of its
// attribute attr ("" for the points without it).
func counterBy(t *testing.T, reader sdkmetric.Reader, name, attr string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	by := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range sum.DataPoints {
					v, _ := dp.Attributes.Value(attribute.Key(attr))
					by[v.AsString()] += dp.Value
				}
			}
		}
	}
	return by
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

// TestARetryIsNotStarvedByLaterSlots: under on_owner_lost retry and
// overlap skip, the owner of a slot dies (its network is cut for good) two
// seconds into a run of a job that runs 6s of every 15s, with a lease TTL
// of 15s: the job's slots keep coming, one lease TTL apart. The slot's
// second attempt must run within a couple of periods. Before, the watcher's
// takeover found the next slot's run holding the job, and was sent again
// when that run's lease would have run out: by then that run had ended and
// the slot after it held the job, and so on; the slot stayed running for
// minutes with no WARN (found by a new user's trial, with examples/nap).
func TestARetryIsNotStarvedByLaterSlots(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const key = "starts"
		table := []scheduler.Job{{Name: "nap", Schedule: "@every 15s", LeaseTTL: 15 * time.Second,
			OnOwnerLost: scheduler.OwnerLostRetry, MaxAttempts: 3}}
		reg := func() *jobs.Registry {
			return registry(t, map[string]jobs.Func{"nap": recorder(h.rdb, key, 6*time.Second)})
		}
		replicas := map[string]*replica{}
		var warned lines
		for _, id := range []string{"r1", "r2", "r3"} {
			replicas[id] = h.start(id, reg(), table, scheduler.WithShutdownGrace(100*time.Millisecond),
				scheduler.WithLogger(slog.New(slog.NewTextHandler(&warned, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", id)))
		}
		// Past the first heartbeats, so that the replicas route among all three.
		at := nextSecond(20 * time.Second).Truncate(15 * time.Second).Add(15 * time.Second)
		sleepUntil(at.Add(2 * time.Second))
		var first *start
		for _, s := range h.starts(key) {
			if s.slot == at.Unix() {
				first = &s
			}
		}
		if first == nil {
			t.Fatalf("slot %v did not start", at.UTC())
		}
		replicas[first.replica].net.freeze() // dead, as Redis sees it
		t.Logf("slot %v: attempt 1 on %s, cut off 2s in", at.UTC(), first.replica)

		sleepUntil(at.Add(4 * time.Minute))
		var second *start
		later := 0
		for _, s := range h.starts(key) {
			switch {
			case s.slot == at.Unix() && s.attempt == 2:
				second = &s
			case s.slot > at.Unix():
				later++
			}
		}
		rec, _ := h.record("nap", at.Unix())
		if second == nil {
			t.Fatalf("after 4 minutes slot %v has no attempt 2 (record %s, attempt %d, owner %s); %d later slots ran meanwhile",
				at.UTC(), rec.State, rec.Attempt, rec.Owner, later)
		}
		t.Logf("attempt 2 on %s, %v after the slot; record %s", second.replica, rec.Started.Sub(at), rec.State)
		for k := int64(1); k <= 6; k++ { // the later slots: each has a record
			r, ok := h.record("nap", at.Unix()+15*k)
			if !ok {
				t.Errorf("slot +%ds has no record", 15*k)
			}
			t.Logf("slot +%ds: %s %s %q", 15*k, r.State, r.Owner, r.Error)
		}
		if d := rec.Started.Sub(at); d > 3*15*time.Second {
			t.Errorf("attempt 2 started %v after its slot: more than three periods (lease TTLs)", d)
		}
		// The takeover says so at WARN: under retry it is the only word that
		// an owner died (before, only attempt 2's INFO "job started").
		said := 0
		for _, l := range warned.all() {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "slot taken over") && strings.Contains(l, "replica="+second.replica) &&
				strings.Contains(l, "slotcron.attempt=2") {
				said++
			}
		}
		if said != 1 {
			t.Errorf("%d WARN lines of the takeover, want 1:\n%s", said, strings.Join(warned.all(), "\n"))
		}
	})
}

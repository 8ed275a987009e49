package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// manualRuns is a job that counts its runs by manual ID ("" for scheduled
// slots, by second), and works for hold.
type manualRuns struct {
	mu   sync.Mutex
	runs map[string]int
	by   map[string]string // ID -> who asked
}

func (m *manualRuns) fn(hold time.Duration) jobs.Func {
	return func(ctx context.Context, run jobs.Run) error {
		m.mu.Lock()
		k := run.Slot.UTC().Format(time.TimeOnly)
		if run.Manual != nil {
			k = "m:" + run.Manual.ID
			m.by[run.Manual.ID] = run.Manual.By + " / " + run.Manual.Note
		}
		m.runs[k]++
		m.mu.Unlock()
		select {
		case <-time.After(hold):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (m *manualRuns) count(k string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[k]
}

// TestTriggerRunsOnceAcrossReplicas: three replicas are asked for the same
// manual slot (one idempotency key) at once: exactly one runs it, and the
// others answer lost, naming it. Asked again after the run, every replica
// finds the record and runs nothing. A trigger without a key is a slot of its
// own each time.
func TestTriggerRunsOnceAcrossReplicas(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(200 * time.Millisecond)}
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *"}} // noon: never during the test
		var reps []*replica
		for _, id := range []string{"a", "b", "c"} {
			reps = append(reps, h.start(id, registry(t, fns), table))
		}
		synctest.Wait() // every replica has started its loop

		ask := slot.Manual{ID: "redo-2000-01-01", By: "ops@host", Note: "the noon draw failed"}
		got := make([]scheduler.Triggered, len(reps))
		var wg sync.WaitGroup
		for i, r := range reps {
			wg.Go(func() {
				var err error
				if got[i], err = r.s.Trigger(context.Background(), "draw", ask); err != nil {
					t.Errorf("Trigger on %s: %v", r.id, err)
				}
			})
		}
		wg.Wait()
		won := 0
		for i, g := range got {
			switch g.Outcome {
			case slot.OutcomeWon:
				won++
				if g.RunID == "" || g.Manual.ID != ask.ID {
					t.Errorf("%s won without a run ID: %+v", reps[i].id, g)
				}
			case slot.OutcomeLost:
				if g.State != slot.StateRunning || g.Holder == reps[i].id {
					t.Errorf("%s lost: %+v", reps[i].id, g)
				}
			default:
				t.Errorf("%s: %+v", reps[i].id, g)
			}
		}
		if won != 1 {
			t.Fatalf("%d replicas won the manual slot, want 1: %+v", won, got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := m.count("m:" + ask.ID); n != 1 {
			t.Fatalf("the manual slot ran %d times", n)
		}
		if m.by[ask.ID] != "ops@host / the noon draw failed" {
			t.Errorf("the run saw Manual %q", m.by[ask.ID])
		}
		rec, ok, err := h.store.ManualRecord(context.Background(), "draw", ask.ID)
		if err != nil || !ok || rec.State != slot.StateDone || rec.Manual.By != ask.By || rec.Manual.Note != ask.Note {
			t.Fatalf("record %+v, %v, %v", rec, ok, err)
		}

		// Again, with the same key: nothing runs.
		for _, r := range reps {
			g, err := r.s.Trigger(context.Background(), "draw", ask)
			if err != nil || g.Outcome != slot.OutcomeLost || g.State != slot.StateDone || g.Holder != rec.Owner {
				t.Errorf("Trigger again on %s: %+v, %v", r.id, g, err)
			}
		}
		// Without a key: a new slot each time.
		for range 2 {
			g, err := reps[1].s.Trigger(context.Background(), "draw", slot.Manual{By: "ops@host"})
			if err != nil || g.Outcome != slot.OutcomeWon || g.Manual.ID == "" {
				t.Fatalf("Trigger without a key: %+v, %v", g, err)
			}
			time.Sleep(time.Second)
		}
		synctest.Wait()
		total := 0
		for k, n := range m.runs {
			if k[:2] == "m:" {
				total += n
			}
		}
		if total != 3 || m.count("m:"+ask.ID) != 1 {
			t.Fatalf("manual runs: %v", m.runs)
		}
	})
}

// TestTriggerBesideAScheduledSlot: a manual slot asked for at the very second
// of a scheduled one is a second slot. With overlap allowed both run; with
// overlap skip, whichever claims second is recorded skipped, with a record
// (at one instant, either may be first).
func TestTriggerBesideAScheduledSlot(t *testing.T) {
	for _, overlap := range []scheduler.Overlap{scheduler.OverlapAllow, scheduler.OverlapSkip} {
		t.Run(string(overlap), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
				fns := map[string]jobs.Func{"tick": m.fn(300 * time.Millisecond)}
				table := []scheduler.Job{{Name: "tick", Schedule: "@every 10s", Overlap: overlap}}
				a := h.start("a", registry(t, fns), table)
				h.start("b", registry(t, fns), table)
				slotAt := nextSecond(0).Truncate(10 * time.Second).Add(10 * time.Second)
				sleepUntil(slotAt)
				g, err := a.s.Trigger(context.Background(), "tick", slot.Manual{ID: "k", By: "ops"})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				sched := m.count(slotAt.UTC().Format(time.TimeOnly))
				manual := m.count("m:k")
				rec, _, _ := h.store.ManualRecord(context.Background(), "tick", "k")
				switch overlap {
				case scheduler.OverlapAllow:
					if sched != 1 || manual != 1 || g.Outcome != slot.OutcomeWon || rec.State != slot.StateDone {
						t.Fatalf("overlap allow: scheduled ran %d, manual %d (%+v), record %+v", sched, manual, g, rec)
					}
				case scheduler.OverlapSkip:
					// Both are due at the same instant, so either may claim
					// first: that one runs, the other is recorded skipped.
					srec, _ := h.record("tick", slotAt.Unix())
					switch {
					case sched == 1 && manual == 0 && g.Outcome == slot.OutcomeSkipped && rec.State == slot.StateSkipped && srec.State == slot.StateDone:
					case sched == 0 && manual == 1 && g.Outcome == slot.OutcomeWon && rec.State == slot.StateDone && srec.State == slot.StateSkipped:
					default:
						t.Fatalf("overlap skip: scheduled ran %d (record %+v), manual %d (%+v, record %+v); want one run, the other recorded skipped",
							sched, srec, manual, g, rec)
					}
				}
			})
		})
	}
}

// TestTriggerIsChecked: an unknown job, a bad key, a note or who asked longer
// than slot.MaxNote and a Scheduler that is not running are errors, before
// anything is sent.
func TestTriggerIsChecked(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		fns := map[string]jobs.Func{"tick": func(context.Context, jobs.Run) error { return nil }}
		table := []scheduler.Job{{Name: "tick", Schedule: "0 0 12 * * *"}}
		r := h.start("a", registry(t, fns), table)
		synctest.Wait()
		if _, err := r.s.Trigger(context.Background(), "nope", slot.Manual{}); err == nil {
			t.Error("Trigger of an unknown job")
		}
		if _, err := r.s.Trigger(context.Background(), "tick", slot.Manual{ID: "has space"}); err == nil {
			t.Error("Trigger with a bad key")
		}
		long := strings.Repeat("n", slot.MaxNote+1)
		for _, m := range []slot.Manual{{Note: long}, {By: long}} {
			if _, err := r.s.Trigger(context.Background(), "tick", m); err == nil || !strings.Contains(err.Error(), "1025 bytes, more than 1024") {
				t.Errorf("Trigger with %d bytes of note and %d of by: %v", len(m.Note), len(m.By), err)
			}
		}
		r.stop()
		if _, err := r.s.Trigger(context.Background(), "tick", slot.Manual{}); !errors.Is(err, scheduler.ErrNotRunning) {
			t.Errorf("Trigger after Run returned: %v", err)
		}
		s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Trigger(context.Background(), "tick", slot.Manual{}); !errors.Is(err, scheduler.ErrNotRunning) {
			t.Errorf("Trigger before Run: %v", err)
		}
	})
}

// TestRunManual: a process that does not run the table (the command line)
// runs a manual slot itself, once; asked again, it runs nothing. Its clock
// is 1.5 s behind Redis's (within max_skew): the slot it answers is its
// record's, on Redis's clock, as the run's is.
func TestRunManual(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(100 * time.Millisecond)}
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *"}}
		h.start("a", registry(t, fns), table)
		for i, want := range []slot.Outcome{slot.OutcomeWon, slot.OutcomeLost} {
			s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"),
				scheduler.WithClock(newStepClock(-1500*time.Millisecond)))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(1200 * time.Millisecond) // not on a whole second
			m2, out, err := s.RunManual(context.Background(), "draw", slot.Manual{ID: "once", By: "me@laptop"})
			if err != nil || out.Outcome != want || m2.ID != "once" {
				t.Fatalf("RunManual %d: %+v, %v", i, out, err)
			}
			if want == slot.OutcomeWon {
				rec, ok, err := h.store.ManualRecord(context.Background(), "draw", "once")
				if out.State != slot.StateDone || out.RunID == "" || err != nil || !ok || !out.Slot.Equal(rec.Slot) {
					t.Fatalf("RunManual ran: %+v; want its record's slot (%+v, %v, %v)", out, rec, ok, err)
				}
			}
		}
		if n := m.count("m:once"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

// TestTriggerWhoseCallerGaveUp: a Trigger returns an error when its caller
// stops waiting (the admin endpoint waits 5 s) before Redis has answered
// its claim. Its slot must not run later than the caller could know of, nor
// be left with no record: a claim that was never answered is recorded
// missed, saying why, and runs only if it had won (its reply lost), once.
// Three cases: the replica refuses to claim (its clock is 10 minutes off,
// and set right a minute later); every claim reply is lost while the
// caller waits, which the first try won; and Redis is away until the
// caller gives up.
func TestTriggerWhoseCallerGaveUp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		offset     time.Duration
		lose, down bool
		runs       int
		state      slot.State
	}{
		{"refused", 10 * time.Minute, false, false, 0, slot.StateMissed},
		{"replies lost", 0, true, false, 1, slot.StateDone},
		// Redis answers again as the caller gives up, before the claim's
		// next try: that try must not win the slot.
		{"Redis away", 0, false, true, 0, slot.StateMissed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
				var lose, down atomic.Bool
				table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *"}}
				r := h.startWith("a", replicaOpts{offset: tc.offset, claimer: func(s *slotstore.Store) scheduler.Claimer {
					return loseWhile{Store: s, lose: &lose, down: &down}
				}},
					registry(t, map[string]jobs.Func{"draw": m.fn(0)}), table)
				time.Sleep(5 * time.Second)
				synctest.Wait()
				lose.Store(tc.lose)
				down.Store(tc.down)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				g, err := r.s.Trigger(ctx, "draw", slot.Manual{ID: "redo", By: "ops"})
				cancel()
				if err == nil {
					t.Fatalf("Trigger: %+v; want an error (its caller gave up before Redis answered)", g)
				}
				down.Store(false)
				time.Sleep(time.Minute)
				lose.Store(false)
				r.clock.step(-tc.offset) // its clock is set right
				time.Sleep(2 * time.Hour)
				synctest.Wait()
				rec, ok, _ := h.store.ManualRecord(context.Background(), "draw", "redo")
				if n := m.count("m:redo"); n != tc.runs || !ok || rec.State != tc.state {
					t.Errorf("manual slot redo, whose Trigger returned %v: ran %d times, record %s %q (found %v); want %d runs, %s",
						err, n, rec.State, rec.Error, ok, tc.runs, tc.state)
				}
				if tc.state == slot.StateMissed && !strings.Contains(rec.Error, "stopped waiting") {
					t.Errorf("manual slot redo recorded missed for %q; want the reason: its caller stopped waiting", rec.Error)
				}
			})
		})
	}
}

// TestManualRetrySeesItsSlot: a manual slot whose owner is lost is retried
// by another replica (on_owner_lost retry). The retry attempt is the same
// manual slot: the job sees the same Slot as attempt 1 (the record's), and
// the same Manual (ID, who asked and their note), not the takeover's time
// and a bare ID.
func TestManualRetrySeesItsSlot(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *", LeaseTTL: time.Second,
			OnOwnerLost: scheduler.OwnerLostRetry, MaxAttempts: 2}}
		ask := slot.Manual{ID: "redo-noon", By: "ops@host", Note: "the noon draw failed"}
		lo := loseManualOwner(t, h, table, ask)
		first, b, spans := lo.first, lo.b, lo.spans
		var second jobs.Run
		select {
		case second = <-lo.runs:
		case <-time.After(3 * time.Minute):
			t.Fatal("no replica retried the manual slot")
		}
		if second.Replica != "b" || second.Attempt != 2 {
			t.Fatalf("second run: %+v", second)
		}
		rec, ok, err := h.store.ManualRecord(context.Background(), "draw", ask.ID)
		if err != nil || !ok {
			t.Fatalf("record: %+v, %v, %v", rec, ok, err)
		}
		for _, run := range []jobs.Run{first, second} {
			if run.Manual == nil || *run.Manual != ask {
				t.Errorf("attempt %d saw Manual %+v, want %+v", run.Attempt, run.Manual, ask)
			}
			if !run.Slot.Equal(rec.Slot) {
				t.Errorf("attempt %d saw Slot %v, want the record's %v", run.Attempt, run.Slot, rec.Slot)
			}
		}
		// So does attempt 2's trace on b, whose claim was the takeover's.
		b.stop()
		checkManualRoot(t, spans, ask.ID, "won",
			map[string]string{"slotcron.slot": rec.Slot.UTC().Format(time.RFC3339), "slotcron.manual_by": ask.By})
	})
}

// lostOwner is a manual slot whose owner is cut off mid-run (loseManualOwner).
type lostOwner struct {
	runs  chan jobs.Run // the runs of job draw, as they start; the first taken
	first jobs.Run      // attempt 1, on replica a
	b     *replica      // the other replica
	spans *tracetest.SpanRecorder
}

// loseManualOwner starts replicas a and b of table (job draw, whose runs
// last until their context ends), each with opts and b with its spans
// recorded; a wins the manual slot ask by Trigger, and 3 s into its run
// (not on the second of the claim) its network freezes.
func loseManualOwner(t *testing.T, h *harness, table []scheduler.Job, ask slot.Manual, opts ...scheduler.Option) lostOwner {
	t.Helper()
	lo := lostOwner{runs: make(chan jobs.Run, 10), spans: tracetest.NewSpanRecorder()}
	fn := func(ctx context.Context, run jobs.Run) error {
		lo.runs <- run
		<-ctx.Done()
		return context.Cause(ctx)
	}
	opts = append(opts, scheduler.WithShutdownGrace(100*time.Millisecond))
	a := h.start("a", registry(t, map[string]jobs.Func{"draw": fn}), table, opts...)
	lo.b = h.start("b", registry(t, map[string]jobs.Func{"draw": fn}), table,
		append(opts, scheduler.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(lo.spans))))...)
	synctest.Wait()
	g, err := a.s.Trigger(context.Background(), "draw", ask)
	if err != nil || g.Outcome != slot.OutcomeWon {
		t.Fatalf("Trigger: %+v, %v", g, err)
	}
	lo.first = <-lo.runs
	time.Sleep(3 * time.Second)
	a.net.freeze()
	return lo
}

// checkManualRoot checks the attributes of the root spans of manual slot id
// whose claims ended in outcome (their names end with it), and that there is
// one.
func checkManualRoot(t *testing.T, spans *tracetest.SpanRecorder, id, outcome string, want map[string]string) {
	t.Helper()
	found := false
	for _, s := range spans.Ended() {
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if s.Parent().IsValid() || attrs["slotcron.manual_id"] != id || !strings.HasSuffix(s.Name(), " "+outcome) {
			continue
		}
		found = true
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("root span %q: %s %q, want %q", s.Name(), k, attrs[k], v)
			}
		}
	}
	if !found {
		t.Errorf("no root span of manual slot %s whose claim ended %s", id, outcome)
	}
}

// TestAnAbandonedManualSlotKeepsItsTime: a manual slot whose owner is lost
// is recorded abandoned by the replica that watched it (on_owner_lost
// abandon). Its abandoned event names the slot by its record's time (its
// first claim, on Redis's clock), as the record and the run did, not by the
// time the watcher took it over.
func TestAnAbandonedManualSlotKeepsItsTime(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *", LeaseTTL: time.Second}}
		events := &eventLog{}
		ask := slot.Manual{ID: "redo-noon", By: "ops@host"}
		lo := loseManualOwner(t, h, table, ask, events.option())
		first, b, spans := lo.first, lo.b, lo.spans
		var rec slot.Record
		for rec.State != slot.StateAbandoned {
			time.Sleep(time.Second)
			var err error
			if rec, _, err = h.store.ManualRecord(context.Background(), "draw", ask.ID); err != nil {
				t.Fatal(err)
			}
			if time.Since(first.Slot) > 3*time.Minute {
				t.Fatalf("the manual slot was not recorded abandoned: %+v", rec)
			}
		}
		synctest.Wait()
		ab := events.of(t, scheduler.EventAbandoned)
		if len(ab) != 1 || ab[0].Replica != "b" || ab[0].Manual != ask.ID || !ab[0].Slot.Equal(rec.Slot) || !first.Slot.Equal(rec.Slot) {
			t.Fatalf("abandoned events %+v; want one from b, at the record's slot %v (the run saw %v)", ab, rec.Slot, first.Slot)
		}
		// So does the root span of b's claim that recorded it.
		b.stop()
		checkManualRoot(t, spans, ask.ID, "abandoned", map[string]string{"slotcron.slot": rec.Slot.UTC().Format(time.RFC3339)})
	})
}

// TestAManualSlotHasOneTime: a manual slot's time is its record's (its first
// claim, on Redis's clock), and a replica whose clock is 1.5 s behind Redis
// (within max_skew) must say so everywhere: Trigger's answer, the run, the
// slot's root span. Its dispatch delay is measured on the replica's own
// clock, from the ask: never negative.
func TestAManualSlotHasOneTime(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		runs := make(chan jobs.Run, 1)
		fns := map[string]jobs.Func{"draw": func(_ context.Context, run jobs.Run) error { runs <- run; return nil }}
		spans := tracetest.NewSpanRecorder()
		r := h.startWith("a", replicaOpts{offset: -1500 * time.Millisecond}, registry(t, fns),
			[]scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *"}},
			scheduler.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
		synctest.Wait()
		time.Sleep(1200 * time.Millisecond) // Redis at 00:00:01.2, the replica at 23:59:59.7
		g, err := r.s.Trigger(context.Background(), "draw", slot.Manual{ID: "one-time", By: "ops@host"})
		if err != nil || g.Outcome != slot.OutcomeWon {
			t.Fatalf("Trigger: %+v, %v", g, err)
		}
		run := <-runs
		synctest.Wait()
		rec, ok, err := h.store.ManualRecord(context.Background(), "draw", "one-time")
		if err != nil || !ok {
			t.Fatalf("record: %+v, %v, %v", rec, ok, err)
		}
		if !run.Slot.Equal(rec.Slot) || !g.Slot.Equal(rec.Slot) {
			t.Errorf("the run's Slot %v and Trigger's %v, want the record's %v", run.Slot, g.Slot, rec.Slot)
		}
		want := rec.Slot.UTC().Format(time.RFC3339)
		var root, delays int
		for _, s := range spans.Ended() {
			for _, a := range s.Attributes() {
				if a.Key == "slotcron.slot" && !s.Parent().IsValid() {
					root++
					if a.Value.AsString() != want {
						t.Errorf("root span %q: slotcron.slot %s, want the record's %s", s.Name(), a.Value.AsString(), want)
					}
				}
			}
			for _, ev := range s.Events() {
				for _, a := range ev.Attributes {
					if a.Key == "slotcron.dispatch_delay_ms" {
						delays++
						if d := a.Value.AsFloat64(); d < 0 {
							t.Errorf("dispatch delay %v ms", d)
						}
					}
				}
			}
		}
		if root != 1 || delays != 1 {
			t.Fatalf("%d root spans with a slot, %d dispatch delays; want 1 of each", root, delays)
		}
	})
}

package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestMetricNamesCoverTheStore: a job's metric options are looked up by
// index among outcomeNames and stateNames, so those must name every outcome
// and run state the store has (an unknown one still works, through a map).
func TestMetricNamesCoverTheStore(t *testing.T) {
	for _, o := range slot.Outcomes {
		if !slices.Contains(outcomeNames[:], string(o)) {
			t.Errorf("outcome %q is not in outcomeNames", o)
		}
	}
	for _, st := range slot.RunStates {
		if !slices.Contains(stateNames[:], string(st)) {
			t.Errorf("run state %q is not in stateNames", st)
		}
	}
	m := newJobMetrics("j")
	if a, b := m.outcome("won"), m.outcome("won"); len(a) != 1 || &a[0] != &b[0] {
		t.Fatal("an outcome's options are built again on each use")
	}
	if a, b := m.outcome("new-outcome"), m.outcome("new-outcome"); len(a) != 1 || &a[0] != &b[0] {
		t.Fatal("an unknown outcome's options are built again on each use")
	}
}

// BenchmarkHedgedLossTrace is what the trace of a hedged claim that a read
// settled costs a replica with no tracing SDK (the default): "first" is the
// batch's first, which starts its spans to learn that there is no SDK, as
// every one did before; "quiet" is each one after it.
//
//	go test -run '^$' -bench HedgedLossTrace -benchmem ./scheduler
func BenchmarkHedgedLossTrace(b *testing.B) {
	tel, err := newTelemetry(defaultConfig(), []string{"job"})
	if err != nil {
		b.Fatal(err)
	}
	c := slot.Claim{Kind: slot.ClaimLive, Job: "job", Slot: time.Unix(1_700_000_000, 0)}
	res := slot.Result{Outcome: slot.OutcomeLost, Holder: "r2", State: slot.StateRunning, Wait: -1}
	now := time.Now()
	for _, quiet := range []bool{false, true} {
		name := "first"
		if quiet {
			name = "quiet"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st := tel.peeked(context.Background(), kindSlot, c, res, now, now, quiet)
				if st.span.SpanContext().IsValid() {
					b.Fatal("a span with a trace ID, with no SDK installed")
				}
				st.end(ending{outcome: string(res.Outcome), holder: res.Holder})
			}
		})
	}
}

// TestRootNamesCoverEveryOutcome: every outcome a claim is counted with,
// the scheduler's own refusals among them, names its root span after it;
// only an outcome this version does not know is "unknown".
func TestRootNamesCoverEveryOutcome(t *testing.T) {
	for _, o := range outcomeNames {
		if got := rootName(kindSlot, o); got != kindSlot+" "+o {
			t.Errorf("outcome %q: root span %q", o, got)
		}
	}
	if got := rootName(kindSlot, "from-a-newer-version"); got != kindSlot+" "+outcomeUnknown {
		t.Errorf("an unknown outcome: root span %q", got)
	}
}

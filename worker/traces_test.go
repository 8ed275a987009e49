package worker

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/slotcron/slotcron/internal/otlptest"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/scheduler"
)

// group runs replicas of the tick job, exporting their traces to a collector.
type group struct {
	collector *otlptest.Collector
	prefix    string
	cancel    context.CancelFunc
	exits     chan int
	stderr    []*syncBuffer
}

func startGroup(t *testing.T, srv *redistest.Server, name string, replicas int, ratio float64) *group {
	g := &group{collector: otlptest.Start(t, "127.0.0.1:0"), prefix: "tr" + name + strconv.Itoa(os.Getpid()), exits: make(chan int, replicas)}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	for r := 1; r <= replicas; r++ {
		path := writeConfig(t, fmt.Sprintf(`replica_id: %s-r%d
redis:
  addrs: [%q]
  key_prefix: %s
lease:
  ttl: 1s
http:
  listen: ""
tracing:
  exporter: otlp-grpc
  endpoint: %s
  sample_ratio: %v
  service_name: slotcron-test
shutdown_grace: 2s
jobs:
  - name: tick
    schedule: "@every 1s"
`, name, r, srv.Addr(), g.prefix, g.collector.Addr, ratio))
		var stderr syncBuffer
		g.stderr = append(g.stderr, &stderr)
		go func() {
			g.exits <- Command(ctx, []string{"run", "-config", path}, ticker(g.prefix+":ticks"), io.Discard, &stderr)
		}()
	}
	return g
}

// waitStarted waits until every replica of g has logged that its scheduler
// started.
func (g *group) waitStarted(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range g.stderr {
		for !strings.Contains(s.String(), `"msg":"scheduler started"`) {
			if time.Now().After(deadline) {
				t.Fatalf("a replica did not start within 30s:\n%s", s.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// stop stops the replicas; they flush their spans before Command returns.
func (g *group) stop(t *testing.T) {
	g.cancel()
	for range g.stderr {
		if code := <-g.exits; code != 0 {
			var logs bytes.Buffer
			for _, s := range g.stderr {
				logs.WriteString(s.String())
			}
			t.Fatalf("a replica exited %d:\n%s", code, logs.String())
		}
	}
}

// isSlotSpan reports whether s is the root span of a scheduled slot: named
// "slot <outcome>" ("slot won", "slot lost"...), with no parent.
func isSlotSpan(s *tracepb.Span) bool {
	return strings.HasPrefix(s.Name, "slot ") && len(s.ParentSpanId) == 0
}

// slotSpans groups the collected slot spans by slot.
func slotSpans(spans []otlptest.Span) map[string][]otlptest.Span {
	out := map[string][]otlptest.Span{}
	for _, r := range spans {
		if isSlotSpan(r.Span) {
			slot := otlptest.Attr(r.Span.Attributes, "slotcron.slot")
			out[slot] = append(out[slot], r)
		}
	}
	return out
}

// TestTracesAcrossReplicas runs two groups of 3 replicas side by side, each
// exporting over OTLP/gRPC to its own in-process collector. With every slot
// sampled, each slot must be one trace holding all 3 replicas' slot spans,
// one "slot won" and two "slot lost" naming the winner. With half sampled, each slot must
// be exported by all 3 replicas or by none, as the trace-ID sampler decides.
func TestTracesAcrossReplicas(t *testing.T) {
	srv := redistest.StartOwned(t)
	full := startGroup(t, srv, "full", 3, 1)
	half := startGroup(t, srv, "half", 3, 0.5)
	// The slots under test start after every replica has started, and each
	// group stops one slot after its last one: a busy machine may start a
	// replica or dispatch a claim late, but not by a whole second more.
	full.waitStarted(t)
	half.waitStarted(t)
	first := time.Now().Add(500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	const fullSlots, halfSlots = 5, 16
	sleepUntil := func(t time.Time) { time.Sleep(time.Until(t)) }
	sleepUntil(first.Add((fullSlots+1)*time.Second + 700*time.Millisecond))
	full.stop(t)
	sleepUntil(first.Add((halfSlots+1)*time.Second + 700*time.Millisecond))
	half.stop(t)

	t.Run("one trace per slot", func(t *testing.T) {
		spans := full.collector.Spans()
		bySlot := slotSpans(spans)
		byID := map[string]otlptest.Span{}
		for _, r := range spans {
			byID[hex.EncodeToString(r.Span.SpanId)] = r
		}
		for i := range fullSlots {
			slot := first.Add(time.Duration(i) * time.Second)
			ss := bySlot[slot.UTC().Format(time.RFC3339)]
			if len(ss) != 3 {
				t.Fatalf("slot %s: %d slot spans, want 3 (one per replica)", slot.Format(time.TimeOnly), len(ss))
			}
			want := scheduler.SlotTraceID(full.prefix, "tick", slot)
			var winner string
			lost, replicas, spanIDs := 0, map[string]bool{}, map[string]bool{}
			for _, r := range ss {
				if got := trace.TraceID(r.Span.TraceId); got != want {
					t.Errorf("slot %s: replica %s's trace %s, want %s (derived from the slot)", slot.Format(time.TimeOnly), r.Instance, got, want)
				}
				if r.Service != "slotcron-test" || otlptest.Attr(r.Span.Attributes, "slotcron.replica") != r.Instance {
					t.Errorf("span resource %s/%s, attribute replica %s", r.Service, r.Instance, otlptest.Attr(r.Span.Attributes, "slotcron.replica"))
				}
				replicas[r.Instance] = true
				spanIDs[hex.EncodeToString(r.Span.SpanId)] = true
				if o := otlptest.Attr(r.Span.Attributes, "slotcron.outcome"); r.Span.Name != "slot "+o {
					t.Errorf("slot %s: replica %s's slot span is named %q, with slotcron.outcome %q", slot.Format(time.TimeOnly), r.Instance, r.Span.Name, o)
				}
				switch otlptest.Attr(r.Span.Attributes, "slotcron.outcome") {
				case "won":
					winner = r.Instance
				case "lost":
					lost++
				}
			}
			if winner == "" || lost != 2 || len(replicas) != 3 || len(spanIDs) != 3 {
				t.Fatalf("slot %s: winner %q, %d lost, %d replicas, %d span IDs; want one winner, 2 lost, 3 replicas with their own span IDs",
					slot.Format(time.TimeOnly), winner, lost, len(replicas), len(spanIDs))
			}
			for _, r := range ss {
				if o := otlptest.Attr(r.Span.Attributes, "slotcron.outcome"); o == "lost" && otlptest.Attr(r.Span.Attributes, "slotcron.holder") != winner {
					t.Errorf("slot %s: %s lost to %q, but %s won", slot.Format(time.TimeOnly), r.Instance, otlptest.Attr(r.Span.Attributes, "slotcron.holder"), winner)
				}
			}
		}
		// The winner's slot spans have lock.claim, job.run (with renewals)
		// and lock.finish under them; the losers' have lock.claim, or
		// lock.peek when spread routing's read of the record settled them.
		children := map[string]map[string]int{}
		renewed := 0
		for _, r := range spans {
			parent := byID[hex.EncodeToString(r.Span.ParentSpanId)]
			if parent.Span == nil || !isSlotSpan(parent.Span) {
				continue
			}
			o := otlptest.Attr(parent.Span.Attributes, "slotcron.outcome")
			if children[o] == nil {
				children[o] = map[string]int{}
			}
			children[o][r.Span.Name]++
			for _, ev := range r.Span.Events {
				if r.Span.Name == "job.run" && ev.Name == "lease.renewed" {
					renewed++
				}
			}
		}
		if children["won"]["lock.claim"] < fullSlots || children["won"]["job.run"] < fullSlots || children["won"]["lock.finish"] < fullSlots ||
			children["lost"]["lock.claim"]+children["lost"]["lock.peek"] < 2*fullSlots || children["lost"]["job.run"] != 0 {
			t.Fatalf("child spans by parent outcome: %v", children)
		}
		if renewed < fullSlots {
			t.Fatalf("%d lease.renewed events on %d runs of 500ms under a 1s lease", renewed, fullSlots)
		}
	})

	t.Run("sampling keeps or drops whole slots", func(t *testing.T) {
		bySlot := slotSpans(half.collector.Spans())
		sampler := sdktrace.TraceIDRatioBased(0.5)
		kept, dropped := 0, 0
		for i := range halfSlots {
			slot := first.Add(time.Duration(i) * time.Second)
			id := scheduler.SlotTraceID(half.prefix, "tick", slot)
			want := 0
			if sampler.ShouldSample(sdktrace.SamplingParameters{TraceID: id}).Decision == sdktrace.RecordAndSample {
				want = 3
			}
			got := len(bySlot[slot.UTC().Format(time.RFC3339)])
			if got != want {
				t.Errorf("slot %s (trace %s): %d replicas exported it, want %d", slot.Format(time.TimeOnly), id, got, want)
			}
			if want == 3 {
				kept++
			} else {
				dropped++
			}
		}
		t.Logf("sample_ratio 0.5 over %d slots: %d kept whole, %d dropped whole", halfSlots, kept, dropped)
		if kept == 0 || dropped == 0 {
			t.Fatalf("%d kept, %d dropped: the run shows nothing about sampling; rerun", kept, dropped)
		}
	})
}

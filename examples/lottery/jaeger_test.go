package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSummarizeRealJaegerTrace reads a trace as a real Jaeger (v2, built
// from v1.76.0) returned it for one slot of the demo, 3 replicas. Each
// replica's root span is named after its outcome, the name Jaeger's timeline
// shows on the span's row.
func TestSummarizeRealJaegerTrace(t *testing.T) {
	raw, err := os.ReadFile("testdata/jaeger-trace.json")
	if err != nil {
		t.Fatal(err)
	}
	var tr jaegerTrace
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(summarize(tr), " · ")
	want := "replica-1 won (job.run, lock.claim, lock.finish) · replica-2 lost to replica-1 (lock.claim) · replica-3 lost to replica-1 (lock.claim)"
	if got != want {
		t.Fatalf("summary:\n got  %s\n want %s", got, want)
	}
	var roots []string
	for _, sp := range tr.Data[0].Spans {
		if len(sp.References) == 0 {
			roots = append(roots, sp.OperationName)
		}
	}
	slices.Sort(roots)
	if got, want := strings.Join(roots, ", "), "slot lost, slot lost, slot won"; got != want {
		t.Fatalf("root spans named %s, want %s", got, want)
	}
}

func TestJaegerUIAddress(t *testing.T) {
	for otlp, want := range map[string]string{"127.0.0.1:4317": "http://127.0.0.1:16686", "jaeger:4317": "http://jaeger:16686"} {
		if got := jaegerUI(otlp); got != want {
			t.Errorf("jaegerUI(%q) = %q, want %q", otlp, got, want)
		}
	}
}

// TestTraceLink: the link opens the trace with its root spans open: the
// UI's Find box matches the spans that carry slotcron.job, and in the real
// trace above they are the root spans alone.
func TestTraceLink(t *testing.T) {
	const id = "b9eff607d00bf1b802d30c3c51c413d7"
	if got, want := traceLink("http://127.0.0.1:16686", id), "http://127.0.0.1:16686/trace/"+id+"?uiFind=slotcron.job"; got != want {
		t.Fatalf("traceLink = %q, want %q", got, want)
	}
	raw, err := os.ReadFile("testdata/jaeger-trace.json")
	if err != nil {
		t.Fatal(err)
	}
	var tr jaegerTrace
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
	for _, sp := range tr.Data[0].Spans {
		// As the Find box matches: the text in the operation, or in a tag's
		// key, value or key=value (the process's tags hold none of it).
		matches := strings.Contains(sp.OperationName, "slotcron.job") || slices.ContainsFunc(sp.Tags, func(kv jaegerTag) bool {
			return strings.Contains(kv.Key+"="+fmt.Sprint(kv.Value), "slotcron.job")
		})
		if root := len(sp.References) == 0; matches != root {
			t.Errorf("span %s (%s): matches slotcron.job %v, is a root span %v", sp.SpanID, sp.OperationName, matches, root)
		}
	}
}

// TestJaegerThatIsNotThere: -jaeger at an address where nothing listens is
// an error before anything starts, not a run whose traces go nowhere.
func TestJaegerThatIsNotThere(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if code := demo(options{schedule: "@every 2s", replicas: 1, slots: 1, jaeger: addr}); code != 2 {
		t.Fatalf("demo with -jaeger %s (nothing there) exited %d, want 2", addr, code)
	}
}

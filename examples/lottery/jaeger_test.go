package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestSummarizeRealJaegerTrace reads a trace as a real Jaeger (v2, built
// from v1.76.0) returned it for one slot of the demo, 3 replicas.
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
}

func TestJaegerUIAddress(t *testing.T) {
	for otlp, want := range map[string]string{"127.0.0.1:4317": "http://127.0.0.1:16686", "jaeger:4317": "http://jaeger:16686"} {
		if got := jaegerUI(otlp); got != want {
			t.Errorf("jaegerUI(%q) = %q, want %q", otlp, got, want)
		}
	}
}

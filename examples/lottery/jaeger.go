package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/scheduler"
)

// jaegerTrace is the part of Jaeger's /api/traces/{id} answer the demo reads.
type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
			References    []struct {
				SpanID string `json:"spanID"`
			} `json:"references"`
			Tags []jaegerTag `json:"tags"`
		} `json:"spans"`
	} `json:"data"`
}

// jaegerTag is one of a span's attributes, as Jaeger's API gives it.
type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// jaegerUI guesses the UI's address from the OTLP one: same host, port 16686.
func jaegerUI(otlp string) string {
	host, _, err := net.SplitHostPort(otlp)
	if err != nil {
		host = otlp
	}
	return "http://" + net.JoinHostPort(host, "16686")
}

// traceLink is the UI's page of one slot's trace, with each replica's root
// span open. The UI opens the spans that match its Find box (uiFind) and
// folds the others; only root spans carry slotcron.job. So each replica's
// row reads its outcome (the span's name), and under it, its replica
// (service.instance.id) and the holder (slotcron.holder).
func traceLink(ui, id string) string {
	return ui + "/trace/" + id + "?uiFind=slotcron.job"
}

// showTraces reads each slot's trace back from Jaeger, as its UI does, and
// prints what it holds: every replica's slot span, its outcome and holder.
// The trace ID is derived from the slot: no search is needed.
func showTraces(ctx context.Context, ui, prefix string, slots []time.Time) bool {
	fmt.Printf("Jaeger (%s) holds one trace per slot:\n", ui)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, s := range slots {
		id := scheduler.SlotTraceID(prefix, lottery.Name, s).String()
		var tr jaegerTrace
		var spans []string
		// Spans arrive in batches; give the last ones a moment.
		for try := 0; try < 10; try++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", ui+"/api/traces/"+id, nil)
			resp, err := client.Do(req)
			if err != nil {
				fmt.Printf("  cannot read %s from Jaeger: %v\n", id, err)
				return false
			}
			tr = jaegerTrace{}
			json.NewDecoder(resp.Body).Decode(&tr)
			resp.Body.Close()
			spans = summarize(tr)
			if len(spans) > 0 && !slices.ContainsFunc(spans, func(x string) bool { return strings.Contains(x, "won") && !strings.Contains(x, "lock.finish") }) {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if len(spans) == 0 {
			spans = []string{"no spans (sampled out, or not exported yet)"}
		}
		fmt.Printf("%s  trace %s  %s\n          %s\n", s.Format(time.TimeOnly), id, strings.Join(spans, " · "), traceLink(ui, id))
	}
	return true
}

func summarize(tr jaegerTrace) []string {
	if len(tr.Data) == 0 {
		return nil
	}
	spans := tr.Data[0].Spans
	children := map[string][]string{}
	for _, sp := range spans {
		for _, ref := range sp.References {
			children[ref.SpanID] = append(children[ref.SpanID], sp.OperationName)
		}
	}
	var out []string
	for _, sp := range spans {
		// A scheduled slot's root span: "slot won", "slot lost"...
		if !strings.HasPrefix(sp.OperationName, "slot ") || len(sp.References) > 0 {
			continue
		}
		tags := map[string]string{}
		for _, t := range sp.Tags {
			tags[t.Key] = fmt.Sprint(t.Value)
		}
		line := tags["slotcron.replica"] + " " + tags["slotcron.outcome"]
		if tags["slotcron.outcome"] == "lost" {
			line += " to " + tags["slotcron.holder"]
		}
		if kids := children[sp.SpanID]; len(kids) > 0 {
			slices.Sort(kids)
			line += " (" + strings.Join(kids, ", ") + ")"
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

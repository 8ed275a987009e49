package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/google/uuid"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
)

// switchingProvider is a no-op tracer provider until on is set, then an SDK:
// like the global provider before and after otel.SetTracerProvider.
type switchingProvider struct {
	embedded.TracerProvider
	on  atomic.Bool
	sdk trace.TracerProvider
}

func (p *switchingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &switchingTracer{p: p, sdk: p.sdk.Tracer(name, opts...), off: noop.NewTracerProvider().Tracer(name)}
}

type switchingTracer struct {
	embedded.Tracer
	p        *switchingProvider
	sdk, off trace.Tracer
}

func (t *switchingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.p.on.Load() {
		return t.sdk.Start(ctx, name, opts...)
	}
	return t.off.Start(ctx, name, opts...)
}

// With no SDK, the scheduler skips the spans of a batch that would all be
// no-ops; an SDK installed while it runs gets every slot's spans from the
// next tick on.
func TestSpansOnceAProviderRecords(t *testing.T) { bubble(t, testSpansOnceAProviderRecords) }

func testSpansOnceAProviderRecords(t *testing.T, e *harness) {
	spans := tracetest.NewSpanRecorder()
	tp := &switchingProvider{sdk: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))}
	names := []string{"a", "b", "c"}
	var table []scheduler.Job
	fns := map[string]jobs.Func{}
	for _, n := range names {
		table = append(table, scheduler.Job{Name: n, Schedule: "@every 1s"})
		fns[n] = func(context.Context, jobs.Run) error { return nil }
	}
	first := nextSecond(500 * time.Millisecond)
	e.start("r1", registry(t, fns), table, scheduler.WithTracerProvider(tp))
	sleepUntil(first.Add(1500 * time.Millisecond)) // two ticks without an SDK
	if n := len(spans.Ended()); n != 0 {
		t.Fatalf("%d spans ended before an SDK was installed", n)
	}
	tp.on.Store(true)

	// Every job's slots from then on have their whole set of spans: wait for
	// two ticks' worth. The only replica wins every slot, and its root spans
	// say so in their name.
	kinds := []string{"slot won", "lock.claim", "job.run", "lock.finish"}
	want := len(names) * 2
	count := func() map[string]int {
		c := map[string]int{}
		for _, s := range spans.Ended() {
			c[s.Name()]++
		}
		return c
	}
	time.Sleep(2 * time.Second) // two ticks with the SDK
	synctest.Wait()
	c := count()
	for _, k := range kinds {
		if c[k] < want {
			t.Fatalf("%d %s spans after two ticks with an SDK, want %d: %v", c[k], k, want, c)
		}
	}
	for _, s := range spans.Ended() {
		if s.Name() == "job.run" {
			var id string
			for _, a := range s.Attributes() {
				if a.Key == "slotcron.run_id" {
					id = a.Value.AsString()
				}
			}
			if u, err := uuid.Parse(id); err != nil || u.Version() != 7 {
				t.Errorf("job.run span's slotcron.run_id %q (%v), want a UUIDv7", id, err)
			}
			// job.run begins when the slot is won, ahead of its time; its
			// job.started event is when the job was called: at the slot's
			// time (a whole second), no later.
			var started []time.Time
			for _, ev := range s.Events() {
				if ev.Name == "job.started" {
					started = append(started, ev.Time)
				}
			}
			if len(started) != 1 || !started[0].Equal(started[0].Truncate(time.Second)) || !s.StartTime().Before(started[0]) {
				t.Errorf("job.run from %v: job.started events at %v, want one, at the slot's time, after the span began", s.StartTime(), started)
			}
		}
		if s.Parent().IsValid() {
			continue
		}
		var job string
		for _, a := range s.Attributes() {
			if a.Key == "slotcron.job" {
				job = a.Value.AsString()
			}
		}
		if job == "" {
			t.Errorf("slot span without slotcron.job: %v", s.Attributes())
		}
	}
}

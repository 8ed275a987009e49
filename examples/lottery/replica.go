package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slotstore"
)

// report is one line a replica writes on stdout for the demo: that it is
// ready, or how a slot went for it (from the scheduler's slot span).
type report struct {
	Event   string `json:"event"` // "ready" or "slot"
	Replica string `json:"replica"`
	Slot    string `json:"slot,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Holder  string `json:"holder,omitempty"`
	Fence   int64  `json:"fence,omitempty"`
}

// reporter is a span processor that turns each finished slot span (the root
// span of a scheduled slot, named "slot won", "slot lost"...) into a report
// line: the same facts Jaeger shows, read in-process.
type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
	id  string
}

func (r *reporter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *reporter) Shutdown(context.Context) error                  { return nil }
func (r *reporter) ForceFlush(context.Context) error                { return nil }

func (r *reporter) OnEnd(s sdktrace.ReadOnlySpan) {
	if !strings.HasPrefix(s.Name(), "slot ") || s.Parent().IsValid() {
		return
	}
	rep := report{Event: "slot", Replica: r.id}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case "slotcron.slot":
			rep.Slot = kv.Value.AsString()
		case "slotcron.outcome":
			rep.Outcome = kv.Value.AsString()
		case "slotcron.holder":
			rep.Holder = kv.Value.AsString()
		case "slotcron.fence":
			rep.Fence = kv.Value.AsInt64()
		}
	}
	r.write(rep)
}

func (r *reporter) write(rep report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(rep)
}

// replica runs the lottery until its stdin closes (the demo ends or dies).
func replica(o options) int {
	// Ctrl-C in a terminal signals the whole process group: the demo stops
	// its replicas itself, by closing their stdin, so that their runs end
	// with a record and their spans are flushed.
	signal.Ignore(os.Interrupt)
	logOut := io.Discard
	if o.verbose {
		logOut = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, nil)).With("replica", o.replicaID)
	rdb := redis.NewClient(&redis.Options{Addr: o.redis, DisableIdentity: true, ContextTimeoutEnabled: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer rdb.Close()

	rep := &reporter{enc: json.NewEncoder(os.Stdout), id: o.replicaID}
	tpOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithIDGenerator(scheduler.NewIDGenerator()),
		sdktrace.WithSpanProcessor(rep),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL,
			semconv.ServiceName("slotcron-lottery"), semconv.ServiceInstanceID(o.replicaID),
			attribute.String("slotcron.replica", o.replicaID))),
	}
	if o.jaeger != "" {
		exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(o.jaeger), otlptracegrpc.WithInsecure())
		if err != nil {
			fmt.Fprintln(os.Stderr, "lottery: jaeger exporter:", err)
			return 1
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(500*time.Millisecond)))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tp.Shutdown(ctx)
	}()

	reg := jobs.NewRegistry()
	if err := lottery.Register(reg, rdb, o.prefix); err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 1
	}
	slots, err := slotstore.New(rdb, o.prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 1
	}
	s, err := scheduler.New(slots, reg,
		scheduler.WithJobs(scheduler.Job{Name: lottery.Name, Schedule: o.schedule, Catchup: scheduler.CatchupNone}),
		scheduler.WithReplicaID(o.replicaID),
		scheduler.WithLogger(log),
		scheduler.WithTracerProvider(tp),
		scheduler.WithShutdownGrace(5*time.Second),
		scheduler.WithKeyPrefix(o.prefix),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the demo closes our stdin to stop us, or dies
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	rep.write(report{Event: "ready", Replica: o.replicaID})
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 1
	}
	return 0
}

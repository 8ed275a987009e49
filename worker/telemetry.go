package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/slotcron/slotcron/scheduler"
)

// Telemetry is the worker's OpenTelemetry set-up: traces to the configured
// exporter, metrics to a Prometheus registry served on /metrics.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Metrics        http.Handler
	shutdown       []func(context.Context) error
}

// NewTelemetry builds the providers for cfg. Spans carry service.name
// (tracing.service_name) and service.instance.id (the replica ID), get their
// slot's trace ID from scheduler.NewIDGenerator, are sampled by trace-ID
// ratio (so every replica keeps or drops the same slots) and are exported in
// batches.
func NewTelemetry(ctx context.Context, cfg *Config) (*Telemetry, error) {
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.Tracing.ServiceName), semconv.ServiceInstanceID(cfg.ReplicaID))
	t := &Telemetry{}

	exp, err := traceExporter(ctx, cfg.Tracing)
	if err != nil {
		return nil, err
	}
	if exp == nil {
		t.TracerProvider = noop.NewTracerProvider()
	} else {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithIDGenerator(scheduler.NewIDGenerator()),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Tracing.SampleRatio))),
			sdktrace.WithBatcher(exp),
		)
		t.TracerProvider = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}

	reg := prometheus.NewRegistry()
	promExp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("worker: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(promExp))
	t.MeterProvider = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return t, nil
}

func traceExporter(ctx context.Context, cfg TracingConfig) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	url := strings.Contains(cfg.Endpoint, "://")
	switch cfg.Exporter {
	case ExporterNone:
		return nil, nil
	case ExporterStdout:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	case ExporterOTLPGRPC:
		opt := otlptracegrpc.WithEndpoint(cfg.Endpoint)
		if url {
			opt = otlptracegrpc.WithEndpointURL(cfg.Endpoint)
		}
		opts := []otlptracegrpc.Option{opt}
		if _, https, _ := endpointHost(cfg.Endpoint); !https {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case ExporterOTLPHTTP:
		opt := otlptracehttp.WithEndpoint(cfg.Endpoint)
		if url {
			opt = otlptracehttp.WithEndpointURL(tracesURL(cfg.Endpoint))
		}
		opts := []otlptracehttp.Option{opt}
		if _, https, _ := endpointHost(cfg.Endpoint); !https {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("worker: tracing.exporter %q", cfg.Exporter)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: %s exporter: %w", cfg.Exporter, err)
	}
	return exp, nil
}

// Shutdown flushes the spans still in the batcher and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// tracesURL is an OTLP/HTTP endpoint URL with the traces path, /v1/traces,
// when it has no path: the exporter would post to "/" (where Jaeger and
// collectors answer 404), where the config's http://host:4318 means the
// receiver.
func tracesURL(endpoint string) string {
	u, err := neturl.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint // the exporter reports what it cannot parse
	}
	u.Path = "/v1/traces"
	return u.String()
}

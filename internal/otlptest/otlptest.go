// Package otlptest is an in-process OTLP/gRPC trace receiver for tests: the
// collector's trace service, keeping every span it is sent with its
// resource's service name and replica (service.instance.id). The worker's
// trace tests export to it from replicas in the test's process; the Compose
// stack's test, from the workers' containers.
package otlptest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Collector receives spans over OTLP/gRPC until its test ends.
type Collector struct {
	collectortrace.UnimplementedTraceServiceServer
	// Addr is the address it listens on.
	Addr  string
	mu    sync.Mutex
	spans []Span
}

// Span is a span received, with its resource's service name and instance ID.
type Span struct {
	Instance, Service string
	*tracepb.Span
}

// Start starts a collector listening on listen ("127.0.0.1:0" for a free
// port of the loopback); the test's cleanup stops it.
func Start(t testing.TB, listen string) *Collector {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("otlptest: listen on %s: %v", listen, err)
	}
	c := &Collector{Addr: l.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return c
}

// Export is the trace service's one call.
func (c *Collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		instance := Attr(rs.GetResource().GetAttributes(), "service.instance.id")
		service := Attr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, Span{instance, service, s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Attr is the value of attribute key among kvs, as Text gives it ("" when
// absent).
func Attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return Text(kv.Value)
		}
	}
	return ""
}

// Text is an attribute's value as text: a string, or an integer ("" for
// any other kind).
func Text(v *commonpb.AnyValue) string {
	switch v := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return v.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(v.IntValue, 10)
	}
	return ""
}

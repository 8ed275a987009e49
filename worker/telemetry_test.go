package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestOTLPHTTPEndpointURLWithoutPath: config.example.yaml says a URL
// endpoint "(http://host:port, https://host:port) also works. Jaeger takes
// both", and check accepts http://127.0.0.1:4318. The spans must then be
// POSTed to the OTLP/HTTP traces path, /v1/traces, where Jaeger and every
// collector listen.
func TestOTLPHTTPEndpointURLWithoutPath(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r) // what Jaeger's OTLP receiver answers elsewhere
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	endpoint := srv.URL // http://127.0.0.1:PORT, as config.example.yaml shows
	cfg, err := Load("config.yaml", []byte("tracing:\n  exporter: otlp-http\n  endpoint: "+endpoint+"\njobs:\n  - name: lottery\n    schedule: \"@every 10s\"\n"), []string{"lottery"})
	if err != nil {
		t.Fatalf("the config is refused: %v", err)
	}
	ctx := context.Background()
	tel, err := NewTelemetry(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("review").Start(ctx, "job.run")
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	shutErr := tel.Shutdown(sctx)

	mu.Lock()
	defer mu.Unlock()
	if len(paths) == 0 {
		t.Fatalf("no span was exported to %s (shutdown: %v)", endpoint, shutErr)
	}
	for _, p := range paths {
		if p != "/v1/traces" {
			t.Errorf("tracing.endpoint %s: spans were POSTed to path %q, not /v1/traces (shutdown error: %v)", endpoint, p, shutErr)
		}
	}
}

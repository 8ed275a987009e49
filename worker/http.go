package worker

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slotstore"
)

// handler serves /healthz (the process is up), /readyz (Redis answers and
// the clock offset is under max_skew), /metrics (Prometheus text), and the
// routes of adminRoutes.
func handler(rdb redis.UniversalClient, s *scheduler.Scheduler, cfg *Config, store *slotstore.Store, adminToken string, metrics http.Handler) http.Handler {
	maxSkew := cfg.Clock.MaxSkew
	mux := http.NewServeMux()
	adminRoutes(mux, cfg, store, s, adminToken)
	mux.HandleFunc("GET /{$}", dashboard(cfg, store, cfg.Tracing.UIURL, adminToken != ""))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		offset, ok := s.Offset()
		switch {
		case !ok:
			http.Error(w, "clock: not measured yet", http.StatusServiceUnavailable)
		case max(offset, -offset) > maxSkew:
			http.Error(w, fmt.Sprintf("clock: offset from Redis %v is above max_skew %v", offset, maxSkew), http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ok: redis answers, clock offset %v\n", offset)
		}
	})
	mux.Handle("GET /metrics", metrics)
	return mux
}

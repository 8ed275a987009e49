package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
)

// ended is how a run's context ended, as the job saw it.
type ended struct {
	run   jobs.Run
	at    time.Time
	cause error
}

// untilCancelled is a job that records its start, then runs until its context
// ends and reports how.
func untilCancelled(e *env, key string, out chan<- ended) jobs.Func {
	rec := recorder(e.rdb, key, time.Hour)
	return func(ctx context.Context, run jobs.Run) error {
		err := rec(ctx, run)
		out <- ended{run, time.Now(), context.Cause(ctx)}
		return err
	}
}

// counter sums an Int64 counter collected by reader.
func counter(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range sum.DataPoints {
					total += dp.Value
				}
			}
		}
	}
	return total
}

// waitFor polls cond every 10ms for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOwnerLoss freezes the network between the winner and Redis in the
// middle of a run. The winner's renewals stop getting through; its job's
// context must end within one lease TTL, with cause ErrLeaseLost. Then the
// other replicas settle the slot by the job's policy.
func TestOwnerLoss(t *testing.T) {
	const ttl = time.Second
	for _, policy := range []scheduler.OwnerLost{scheduler.OwnerLostRetry, scheduler.OwnerLostAbandon} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t)
			proxy := redistest.StartProxy(t, e.srv.Addr())
			key := e.srv.Key("starts")
			out := make(chan ended, 100)
			job := scheduler.Job{Name: "long", Schedule: "@every 1s", LeaseTTL: ttl, OnOwnerLost: policy}
			if policy == scheduler.OwnerLostRetry {
				job.MaxAttempts = 3
			}
			reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"long": untilCancelled(e, key, out)}) }
			grace := scheduler.WithShutdownGrace(100 * time.Millisecond)

			// The winner starts alone, through the proxy, and takes a slot. Its
			// spans and metrics are kept in memory.
			spans := tracetest.NewSpanRecorder()
			metrics := sdkmetric.NewManualReader()
			e.start("winner", proxy.Addr(), reg(), []scheduler.Job{job}, grace,
				scheduler.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
				scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
			waitFor(t, 5*time.Second, "the winner started no run", func() bool { return len(e.starts(key)) == 1 })
			first := e.starts(key)[0]
			// The others start; the run holds the job, so they skip and watch it.
			e.start("b", "", reg(), []scheduler.Job{job}, grace)
			e.start("c", "", reg(), []scheduler.Job{job}, grace)
			time.Sleep(1500 * time.Millisecond)

			frozen := time.Now()
			proxy.Freeze()
			var lost ended
			select {
			case lost = <-out:
			case <-time.After(3 * ttl):
				t.Fatal("the winner's job context did not end after its network froze")
			}
			took := lost.at.Sub(frozen)
			t.Logf("winner's context ended %v after the freeze: %v", took.Round(time.Millisecond), lost.cause)
			if lost.run.Replica != "winner" || !errors.Is(lost.cause, locking.ErrLeaseLost) {
				t.Fatalf("ended: %+v, want the winner's run with cause ErrLeaseLost", lost)
			}
			if took > ttl {
				t.Fatalf("the job's context ended %v after the freeze, more than one lease TTL (%v)", took, ttl)
			}
			// The loss is on the run's span and in the metrics, though no
			// renewal ever answered: the TTL ran out locally.
			waitFor(t, 2*time.Second, "no job.run span with a lease.lost event", func() bool {
				for _, s := range spans.Ended() {
					for _, ev := range s.Events() {
						if s.Name() == "job.run" && ev.Name == "lease.lost" {
							return true
						}
					}
				}
				return false
			})
			if n := counter(t, metrics, "slotcron.lease_lost"); n != 1 {
				t.Fatalf("slotcron.lease_lost = %d, want 1", n)
			}

			switch policy {
			case scheduler.OwnerLostRetry:
				var second start
				waitFor(t, 5*time.Second, "no replica ran attempt 2", func() bool {
					for _, s := range e.starts(key) {
						if s.slot == first.slot && s.attempt == 2 {
							second = s
							return true
						}
					}
					return false
				})
				if second.replica == "winner" || second.fence <= first.fence {
					t.Fatalf("attempt 2: %+v after attempt 1 %+v; want another replica and a larger fence", second, first)
				}
				rec, _ := e.record("long", first.slot)
				if rec.State != locking.StateRunning || rec.Attempt != 2 || rec.Owner != second.replica {
					t.Fatalf("record %+v", rec)
				}
			case scheduler.OwnerLostAbandon:
				waitFor(t, 5*time.Second, "the slot was not recorded abandoned", func() bool {
					rec, _ := e.record("long", first.slot)
					return rec.State == locking.StateAbandoned
				})
				time.Sleep(2 * ttl) // nobody runs it again
				for _, s := range e.starts(key) {
					if s.slot == first.slot && s.attempt != 1 {
						t.Fatalf("an abandoned slot ran again: %+v", s)
					}
				}
			}
			proxy.Thaw()
		})
	}
}

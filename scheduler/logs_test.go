package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestFailedRunsLogAboveInfo: a failed run's "job finished" line is WARN, a
// done one's INFO, so a pipeline that keeps WARN and up sees every failure.
func TestFailedRunsLogAboveInfo(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var buf lines
		reg := jobs.NewRegistry()
		reg.Register("fails", func(ctx context.Context, run jobs.Run) error { return errors.New("boom") })
		reg.Register("works", func(ctx context.Context, run jobs.Run) error { return nil })
		h.start("a", reg, []scheduler.Job{{Name: "fails", Schedule: "@every 1s"}, {Name: "works", Schedule: "@every 1s"}},
			scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		var failed, done int
		for _, l := range buf.all() {
			if !strings.Contains(l, `msg="job finished"`) {
				continue
			}
			switch {
			case strings.Contains(l, "level=WARN") && strings.Contains(l, "state=failed") && strings.Contains(l, "error=boom"):
				failed++
			case strings.Contains(l, "level=INFO") && strings.Contains(l, "state=done"):
				done++
			default:
				t.Errorf("line %q", l)
			}
		}
		if failed < 2 || done < 2 {
			t.Fatalf("%d failed and %d done runs logged, want at least 2 each:\n%s", failed, done, strings.Join(buf.all(), "\n"))
		}
	})
}

// lines keeps what a logger writes.
type lines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestJobsLogWithTheRunsAttributes: run.Logger is the scheduler's logger
// with the run's job, slot, fence, attempt, replica and run ID; the run ID
// is a UUIDv7, and the slot's record keeps it.
func TestJobsLogWithTheRunsAttributes(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var buf lines
		reg := jobs.NewRegistry()
		var mu sync.Mutex
		var runs []jobs.Run
		reg.Register("talks", func(ctx context.Context, run jobs.Run) error {
			run.Logger.Info("hello from the job")
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
			return nil
		})
		h.start("a", reg, []scheduler.Job{{Name: "talks", Schedule: "@every 1s"}},
			scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(runs) == 0 {
			t.Fatal("no run")
		}
		run := runs[0]
		if id, err := uuid.Parse(run.RunID); err != nil || id.Version() != 7 {
			t.Fatalf("run ID %q (%v), want a UUIDv7", run.RunID, err)
		}
		if rec, ok := h.record("talks", run.Slot.Unix()); !ok || rec.RunID != run.RunID {
			t.Fatalf("record %+v, want run ID %s", rec, run.RunID)
		}
		for _, l := range buf.all() {
			if strings.Contains(l, `msg="hello from the job"`) && strings.Contains(l, "slotcron.slot="+run.Slot.UTC().Format(time.RFC3339)) {
				for _, want := range []string{"slotcron.replica=a", "slotcron.job=talks", "slotcron.fence=", "slotcron.attempt=1", "slotcron.run_id=" + run.RunID} {
					if !strings.Contains(l, want) {
						t.Fatalf("line %q lacks %s", l, want)
					}
				}
				return
			}
		}
		t.Fatalf("the job's line is missing:\n%s", strings.Join(buf.all(), "\n"))
	})
}

// unreplicatedFinishes is a store whose finishes take effect but are not
// acknowledged by the replicas wait_replicas asks for; with lost, each
// finish also found its run's record gone, and wrote it anew (slotstore
// joins the two errors so).
type unreplicatedFinishes struct {
	*slotstore.Store
	lost bool
}

func (u unreplicatedFinishes) Finish(ctx context.Context, reqs []slot.FinishRequest) []error {
	errs := u.Store.Finish(ctx, reqs)
	for i, err := range errs {
		if err == nil {
			errs[i] = fmt.Errorf("%w: 0 of 1", slot.ErrUnreplicated)
			if u.lost {
				errs[i] = errors.Join(fmt.Errorf("%w: the slot's record was gone; it is recorded anew", slot.ErrDataLoss), errs[i])
			}
		}
	}
	return errs
}

// TestUnreplicatedRecordsLogAtError: a run whose final record the replicas
// did not acknowledge is logged at ERROR, once, and not finished again; a
// failed one is still an event (before, the operator never heard of a
// failure whose record went unacknowledged). A finish that also found the
// record gone, and wrote it anew, reports both the data loss and that the
// record written anew is unacknowledged (before, only the loss).
func TestUnreplicatedRecordsLogAtError(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("record lost=%v", lost), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				var buf lines
				var events eventLog
				reg := jobs.NewRegistry()
				reg.Register("j", func(ctx context.Context, run jobs.Run) error { return nil })
				reg.Register("bad", func(ctx context.Context, run jobs.Run) error { return errors.New("boom") })
				h.startWith("a", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { return unreplicatedFinishes{s, lost} }},
					reg, []scheduler.Job{{Name: "j", Schedule: "@every 1s"}, {Name: "bad", Schedule: "@every 1s"}},
					scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), events.option())
				time.Sleep(1500 * time.Millisecond)
				synctest.Wait()
				var errs, failedErrs, losses, infos int
				for _, l := range buf.all() {
					if strings.Contains(l, "a failover now could lose the record") && strings.Contains(l, "level=ERROR") {
						switch {
						case strings.Contains(l, "state=done"):
							errs++
						case strings.Contains(l, "state=failed"):
							failedErrs++
						}
					}
					if strings.Contains(l, "Redis lost data") && strings.Contains(l, "level=ERROR") {
						losses++
					}
					if strings.Contains(l, `msg="job finished"`) {
						infos++
					}
				}
				if errs == 0 || failedErrs == 0 || infos != 0 || (losses > 0) != lost {
					t.Fatalf("%d ERROR lines for done runs, %d for failed ones, %d of data loss, %d 'job finished' lines:\n%s",
						errs, failedErrs, losses, infos, strings.Join(buf.all(), "\n"))
				}
				if n := len(events.of(t, scheduler.EventFailed)); n != failedErrs {
					t.Errorf("%d failed events for %d failed runs", n, failedErrs)
				}
			})
		})
	}
}

// TestResultsAreRecorded: what a run passes to jobs.SetResult is in its
// slot's record, with its final state, failed runs included.
func TestResultsAreRecorded(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		reg := jobs.NewRegistry()
		reg.Register("ok", func(ctx context.Context, run jobs.Run) error {
			return jobs.SetResult(ctx, "drew "+run.Slot.UTC().Format(time.TimeOnly))
		})
		reg.Register("bad", func(ctx context.Context, run jobs.Run) error {
			if err := jobs.SetResult(ctx, "half done"); err != nil {
				return err
			}
			return errors.New("boom")
		})
		first := nextSecond(0)
		h.start("a", reg, []scheduler.Job{{Name: "ok", Schedule: "@every 1s"}, {Name: "bad", Schedule: "@every 1s"}})
		sleepUntil(first.Add(1500 * time.Millisecond))
		synctest.Wait()
		for i := int64(0); i <= 1; i++ {
			at := first.Unix() + i
			if rec, ok := h.record("ok", at); !ok || rec.State != slot.StateDone || rec.Result != "drew "+time.Unix(at, 0).UTC().Format(time.TimeOnly) {
				t.Errorf("ok's record %+v", rec)
			}
			if rec, ok := h.record("bad", at); !ok || rec.State != slot.StateFailed || rec.Result != "half done" || rec.Error != "boom" {
				t.Errorf("bad's record %+v", rec)
			}
		}
	})
}

// TestJobDurationBucketsAreSeconds: a run of 20ms lands in a bucket between
// 10ms and 50ms of slotcron.job_duration, whose bounds go from 1ms to 1h,
// not in OTel's millisecond-style default first bucket (0–5 "seconds").
func TestJobDurationBucketsAreSeconds(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		reader := sdkmetric.NewManualReader()
		reg := jobs.NewRegistry()
		reg.Register("j", func(ctx context.Context, run jobs.Run) error { time.Sleep(20 * time.Millisecond); return nil })
		h.start("a", reg, []scheduler.Job{{Name: "j", Schedule: "@every 1s"}},
			scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				hist, ok := m.Data.(metricdata.Histogram[float64])
				if m.Name != "slotcron.job_duration" || !ok {
					continue
				}
				for _, dp := range hist.DataPoints {
					b := dp.Bounds
					if b[0] != 0.001 || b[len(b)-1] != 3600 {
						t.Fatalf("bounds %v, want 0.001 .. 3600 s", b)
					}
					for i, n := range dp.BucketCounts {
						if n > 0 && (i == 0 || b[i-1] < 0.01 || i == len(b) || b[i] > 0.05) {
							t.Fatalf("a 20ms run in bucket %d of %v", i, b)
						}
					}
				}
				return
			}
		}
		t.Fatal("no slotcron.job_duration")
	})
}

package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
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
// with the run's job, slot, fence, attempt and replica.
func TestJobsLogWithTheRunsAttributes(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var buf lines
		reg := jobs.NewRegistry()
		reg.Register("talks", func(ctx context.Context, run jobs.Run) error {
			run.Logger.Info("hello from the job")
			return nil
		})
		h.start("a", reg, []scheduler.Job{{Name: "talks", Schedule: "@every 1s"}},
			scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		for _, l := range buf.all() {
			if strings.Contains(l, `msg="hello from the job"`) {
				for _, want := range []string{"slotcron.replica=a", "slotcron.job=talks", "slotcron.slot=", "slotcron.fence=", "slotcron.attempt=1"} {
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

package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/worker"
)

// The main a user writes to run their own jobs; the README shows it. (It is
// compiled, not run: Main parses os.Args and exits.)
func Example() {
	worker.Main(func(reg *jobs.Registry, env worker.Env) error {
		return reg.Register("invoice-run", func(ctx context.Context, run jobs.Run) error {
			// ctx ends on timeout, shutdown, or lease loss (cause locking.ErrLeaseLost).
			// Pass run.Fence to whatever you write, so a paused former owner is refused.
			return sendInvoices(ctx, run.Slot, run.Fence)
		})
	})
}

func sendInvoices(ctx context.Context, slot time.Time, fence int64) error { return nil }

// TestREADMEShowsTheExample keeps the README's main in step with Example.
func TestREADMEShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	body = body[strings.Index(body, "\tworker.Main("):]
	body = body[:strings.Index(body, "\n}\n")]
	if !strings.Contains(string(readme), body) {
		t.Fatalf("README.md does not show Example's main:\n%s", body)
	}
}

package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/slotcron/slotcron/jobs"
)

func TestSetResult(t *testing.T) {
	if err := jobs.SetResult(context.Background(), "x"); !errors.Is(err, jobs.ErrNoRun) {
		t.Fatalf("outside a run: %v, want ErrNoRun", err)
	}
	ctx, result := jobs.CaptureResult(context.Background())
	if err := jobs.SetResult(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if err := jobs.SetResult(ctx, strings.Repeat("x", jobs.MaxResult)); err != nil {
		t.Fatalf("a result of MaxResult bytes: %v", err)
	}
	if err := jobs.SetResult(ctx, strings.Repeat("x", jobs.MaxResult+1)); err == nil || !strings.Contains(err.Error(), "at most 1024 bytes, got 1025") {
		t.Fatalf("a result over MaxResult: %v", err)
	}
	if got := result(); got != strings.Repeat("x", jobs.MaxResult) {
		t.Fatalf("result %d bytes, want the last one accepted", len(got))
	}
}

package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slotcron/slotcron/jobs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noop(context.Context, jobs.Run) error { return nil }

func TestRegister(t *testing.T) {
	tests := []struct {
		name string
		fn   jobs.Func
		is   error
	}{
		{"lottery", noop, nil},
		{"nightly.report_v2-eu", noop, nil},
		{"", noop, jobs.ErrInvalidName},
		{"has space", noop, jobs.ErrInvalidName},
		{"brace{tag}", noop, jobs.ErrInvalidName},
		{"colon:x", noop, jobs.ErrInvalidName},
		{"ünicode", noop, jobs.ErrInvalidName},
		{"lottery", noop, jobs.ErrDuplicate},
		{"nilfunc", nil, nil},
	}
	reg := jobs.NewRegistry()
	for _, tt := range tests {
		err := reg.Register(tt.name, tt.fn)
		switch {
		case tt.fn == nil:
			if err == nil {
				t.Errorf("Register(%q, nil) accepted", tt.name)
			}
		case tt.is == nil && err != nil:
			t.Errorf("Register(%q): %v", tt.name, err)
		case tt.is != nil && !errors.Is(err, tt.is):
			t.Errorf("Register(%q) = %v, want %v", tt.name, err, tt.is)
		}
	}
	if got := strings.Join(reg.Names(), ","); got != "lottery,nightly.report_v2-eu" {
		t.Fatalf("Names = %s", got)
	}
	if _, ok := reg.Lookup("lottery"); !ok {
		t.Fatal("Lookup of a registered name failed")
	}
	if _, ok := reg.Lookup("nope"); ok {
		t.Fatal("Lookup of an unknown name succeeded")
	}
}

func TestRunInContext(t *testing.T) {
	run := jobs.Run{Job: "j", Slot: time.Unix(60, 0), Attempt: 2, Fence: 9, Replica: "r1", Token: "t"}
	got, ok := jobs.FromContext(jobs.WithRun(context.Background(), run))
	if !ok || got != run {
		t.Fatalf("FromContext = %+v, %v", got, ok)
	}
	if _, ok := jobs.FromContext(context.Background()); ok {
		t.Fatal("FromContext found a Run in an empty context")
	}
}

func TestRecoverKeepsTheStack(t *testing.T) {
	boom := errors.New("boom")
	fn := jobs.Recover()(func(context.Context, jobs.Run) error { panic(boom) })
	err := fn(context.Background(), jobs.Run{})
	var pe *jobs.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *PanicError", err)
	}
	if !errors.Is(err, boom) {
		t.Fatal("the panic value is not unwrapped")
	}
	if !strings.Contains(string(pe.Stack), "TestRecoverKeepsTheStack") {
		t.Fatalf("stack does not show the panicking test:\n%s", pe.Stack)
	}
}

// TestNoRecoveryWithoutMiddleware pins the default: a bare Func panics (the
// scheduler recovers on its own; see scheduler tests).
func TestNoRecoveryWithoutMiddleware(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a bare Func swallowed its panic")
		}
	}()
	jobs.Chain()(func(context.Context, jobs.Run) error { panic("bare") })(context.Background(), jobs.Run{})
}

func TestTimeoutCause(t *testing.T) {
	fn := jobs.Timeout(20 * time.Millisecond)(func(ctx context.Context, _ jobs.Run) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})
	err := fn(context.Background(), jobs.Run{})
	if !errors.Is(err, jobs.ErrTimeout) {
		t.Fatalf("cause = %v, want ErrTimeout", err)
	}
}

// TestTimeoutNamesItsCause: a job that returns ctx.Err() gets the timeout
// named in its error; a job that fails on its own keeps its error as is.
func TestTimeoutNamesItsCause(t *testing.T) {
	plain := jobs.Timeout(time.Millisecond)(func(ctx context.Context, _ jobs.Run) error {
		<-ctx.Done()
		return ctx.Err()
	})
	err := plain(context.Background(), jobs.Run{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, jobs.ErrTimeout) || !strings.Contains(err.Error(), "jobs: timeout after 1ms") {
		t.Fatalf("err = %v, want DeadlineExceeded naming the timeout", err)
	}
	own := errors.New("disk full")
	failing := jobs.Timeout(time.Hour)(func(context.Context, jobs.Run) error { return own })
	if err := failing(context.Background(), jobs.Run{}); err != own {
		t.Fatalf("err = %v, want the job's own error untouched", err)
	}
}

func TestChainOrder(t *testing.T) {
	var order []string
	mw := func(name string) jobs.Middleware {
		return func(next jobs.Func) jobs.Func {
			return func(ctx context.Context, run jobs.Run) error {
				order = append(order, name)
				return next(ctx, run)
			}
		}
	}
	jobs.Chain(mw("outer"), mw("inner"))(noop)(context.Background(), jobs.Run{})
	if strings.Join(order, ",") != "outer,inner" {
		t.Fatalf("order = %v", order)
	}
}

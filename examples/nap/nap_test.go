package nap_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/examples/nap"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
)

func TestNapSleepsItsDuration(t *testing.T) {
	began := time.Now()
	if err := nap.New(50*time.Millisecond)(context.Background(), jobs.Run{}); err != nil {
		t.Fatalf("a full nap returned %v", err)
	}
	if took := time.Since(began); took < 50*time.Millisecond {
		t.Errorf("the nap took %v, want at least 50ms", took)
	}
}

func TestNapWokenByItsContextSaysWhy(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(20*time.Millisecond, func() { cancel(slot.ErrLeaseLost) })
	began := time.Now()
	err := nap.New(time.Hour)(ctx, jobs.Run{})
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the nap took %v after its context ended", took)
	}
	if !errors.Is(err, slot.ErrLeaseLost) {
		t.Fatalf("a woken nap returned %v, want an error wrapping slot.ErrLeaseLost", err)
	}
	if !strings.HasPrefix(err.Error(), "nap: woken after ") || !strings.Contains(err.Error(), " of 1h0m0s: ") {
		t.Errorf("the error %q does not say how long the nap slept", err)
	}
}

func TestRegister(t *testing.T) {
	reg := jobs.NewRegistry()
	if err := nap.Register(reg); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Lookup(nap.Name); !ok {
		t.Fatalf("Register did not register %q", nap.Name)
	}
}

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// endable is a context that ends when end is called, with err, and that
// the context package does not know: a child hears that it ended from a
// goroutine of its own, which may not have run when its other children
// already have. (A lease's context ends its children in no set order: the
// run's context may be told before the loss watch, and the run may return
// before the watch has started.)
type endable struct {
	context.Context
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func newEndable() *endable {
	return &endable{Context: context.Background(), done: make(chan struct{})}
}

func (c *endable) Done() <-chan struct{} { return c.done }
func (c *endable) Err() error            { c.mu.Lock(); defer c.mu.Unlock(); return c.err }
func (c *endable) end(err error)         { c.mu.Lock(); c.err = err; c.mu.Unlock(); close(c.done) }

type causes struct {
	mu  sync.Mutex
	got []error
}

func (c *causes) record(cause error) { c.mu.Lock(); c.got = append(c.got, cause); c.mu.Unlock() }
func (c *causes) all() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.got...)
}

// TestWatchLossWhenTheRunReturnsFirst: the lease is lost and the run
// returns, and settles, before the watch has started: the loss is recorded
// all the same, once. (Seen as a flake of TestOwnerLoss, about 1 run in
// 300 with 4 CPUs: no lease.lost event, no metric, no lease_lost alert.)
func TestWatchLossWhenTheRunReturnsFirst(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // the watch's goroutine can't run until this one yields
	ctx, rec := newEndable(), &causes{}
	settle := watchLoss(ctx, rec.record)
	lost := fmt.Errorf("renewal refused: %w", slot.ErrLeaseLost)
	ctx.end(lost)
	if !settle() {
		t.Fatal("settle says not lost")
	}
	if got := rec.all(); len(got) != 1 || got[0] != lost {
		t.Fatalf("recorded %v by the time settle returned, want the loss once", got)
	}
	time.Sleep(10 * time.Millisecond) // the watch's goroutine runs now, if it was to
	if got := rec.all(); len(got) != 1 {
		t.Fatalf("recorded %v, want the loss once", got)
	}
}

// TestWatchLoss: a loss the watch sees first is recorded once, before
// settle returns; a lease that ends otherwise (released, or the scheduler
// stopping) records nothing; nor does one that ends after settle. settle
// says which: the run's outcome follows it, not the lease as it is later
// (a loss after settle, unrecorded, must not make the run's outcome
// abandoned, or leave its slot to a takeover that nothing reported).
func TestWatchLoss(t *testing.T) {
	lost := fmt.Errorf("ttl ran out: %w", slot.ErrLeaseLost)
	t.Run("watch first", func(t *testing.T) {
		ctx, end := context.WithCancelCause(context.Background())
		rec := &causes{}
		settle := watchLoss(ctx, rec.record)
		end(lost)
		if !settle() {
			t.Fatal("settle says not lost")
		}
		if got := rec.all(); len(got) != 1 || got[0] != lost {
			t.Fatalf("recorded %v, want the loss once", got)
		}
	})
	t.Run("not a loss", func(t *testing.T) {
		ctx, end := context.WithCancelCause(context.Background())
		rec := &causes{}
		settle := watchLoss(ctx, rec.record)
		end(errors.New("released"))
		if settle() {
			t.Fatal("settle says lost")
		}
		if got := rec.all(); len(got) != 0 {
			t.Fatalf("recorded %v, want nothing", got)
		}
	})
	t.Run("after settle", func(t *testing.T) {
		ctx, end := context.WithCancelCause(context.Background())
		rec := &causes{}
		settle := watchLoss(ctx, rec.record)
		if settle() {
			t.Fatal("settle says lost")
		}
		end(lost)
		time.Sleep(10 * time.Millisecond)
		if got := rec.all(); len(got) != 0 {
			t.Fatalf("recorded %v after the run had settled, want nothing", got)
		}
		for _, policy := range []OwnerLost{OwnerLostAbandon, OwnerLostRetry} {
			if state, _ := outcome(errors.New("boom"), ctx, false, policy); state != slot.StateFailed {
				t.Errorf("outcome of a run that failed before its lease was lost (%s): %q, want failed", policy, state)
			}
		}
	})
}

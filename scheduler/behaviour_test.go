package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
)

// TestMisfireIsRecordedNotStartedLate: a replica whose clock lags by 1s claims
// every slot 1s late; with a 500ms misfire grace, judged on Redis's clock,
// each slot is recorded missed and none starts.
func TestMisfireIsRecordedNotStartedLate(t *testing.T) {
	e := newEnv(t)
	key := e.srv.Key("starts")
	table := []scheduler.Job{{Name: "tight", Schedule: "@every 1s", MisfireGrace: 500 * time.Millisecond}}
	first := nextSecond(500 * time.Millisecond)
	e.start("laggard", "", registry(t, map[string]jobs.Func{"tight": recorder(e.rdb, key, 0)}), table,
		scheduler.WithClock(offsetClock{-time.Second}))
	sleepUntil(first.Add(3500 * time.Millisecond))
	if starts := e.starts(key); len(starts) != 0 {
		t.Fatalf("slots started late: %+v", starts)
	}
	for slot := first.Unix(); slot < first.Unix()+3; slot++ {
		rec, ok := e.record("tight", slot)
		if !ok || rec.State != locking.StateMissed || !strings.Contains(rec.Error, "past the misfire grace") {
			t.Errorf("slot %d: %+v (found %v), want missed past the grace", slot, rec, ok)
		}
	}
}

// TestRefusesToClaimAboveMaxSkew: a replica whose clock is 3s ahead (max_skew
// 2s) claims nothing; a healthy replica runs every slot.
func TestRefusesToClaimAboveMaxSkew(t *testing.T) {
	e := newEnv(t)
	key := e.srv.Key("starts")
	table := []scheduler.Job{{Name: "job", Schedule: "@every 1s"}}
	fns := map[string]jobs.Func{"job": recorder(e.rdb, key, 0)}
	skewed := e.start("skewed", "", registry(t, fns), table, scheduler.WithClock(offsetClock{3 * time.Second}))
	first := nextSecond(500 * time.Millisecond)
	sleepUntil(first)
	e.start("healthy", "", registry(t, fns), table)
	sleepUntil(first.Add(3500 * time.Millisecond))

	offset, ok := skewed.s.Offset()
	if !ok || offset > -2900*time.Millisecond || offset < -3100*time.Millisecond {
		t.Fatalf("skewed replica measured offset %v (%v), want about -3s", offset, ok)
	}
	for _, s := range e.starts(key) {
		if s.replica != "healthy" {
			t.Fatalf("the skewed replica ran %+v", s)
		}
	}
	for slot := first.Unix() + 1; slot < first.Unix()+3; slot++ {
		rec, ok := e.record("job", slot)
		if !ok || rec.Owner != "healthy" || rec.State != locking.StateDone {
			t.Errorf("slot %d: %+v (%v), want done by the healthy replica", slot, rec, ok)
		}
	}
}

// TestGracefulStop: stopping stops claiming at once; a run that ends within
// the shutdown grace is recorded done; one that does not is cancelled with
// ErrShutdown and recorded failed. Run returns when both have been recorded.
func TestGracefulStop(t *testing.T) {
	e := newEnv(t)
	key := e.srv.Key("starts")
	causes := make(chan error, 10)
	long := func(ctx context.Context, run jobs.Run) error {
		e.rdb.RPush(context.Background(), key, fmt.Sprintf("long|%d|%s|%d|%d", run.Slot.Unix(), run.Replica, run.Attempt, run.Fence))
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}
	table := []scheduler.Job{
		{Name: "long", Schedule: "@every 2s"},
		{Name: "quick", Schedule: "@every 2s"},
	}
	const grace = 600 * time.Millisecond
	r := e.start("r", "", registry(t, map[string]jobs.Func{"long": long, "quick": recorder(e.rdb, key, 300*time.Millisecond)}),
		table, scheduler.WithShutdownGrace(grace))
	// Both jobs start at the same slot; stop well before the next one (2s later).
	waitFor(t, 5*time.Second, "the jobs did not start", func() bool { return len(e.starts(key)) == 2 })
	starts := e.starts(key)
	if starts[0].slot != starts[1].slot {
		t.Fatalf("the jobs started at different slots: %+v", starts)
	}
	slot := starts[0].slot

	stopped := time.Now()
	r.stop()
	took := time.Since(stopped)
	if took < grace || took > grace+time.Second {
		t.Fatalf("Run returned %v after the stop, want about the %v grace", took, grace)
	}
	if err := <-causes; !errors.Is(err, scheduler.ErrShutdown) {
		t.Fatalf("the long job's context ended with %v, want ErrShutdown", err)
	}
	if r.runErr != nil {
		t.Fatalf("Run: %v", r.runErr)
	}
	if n := len(e.starts(key)); n != 2 {
		t.Fatalf("%d starts after the stop, want the 2 from before it: no new claims", n)
	}
	quick, _ := e.record("quick", slot)
	longRec, _ := e.record("long", slot)
	if quick.State != locking.StateDone {
		t.Errorf("quick job: %+v, want done within the grace", quick)
	}
	if longRec.State != locking.StateFailed || !strings.Contains(longRec.Error, "shutdown") {
		t.Errorf("long job: %+v, want failed with the shutdown cause", longRec)
	}
}

// TestTimeoutAndPanic: a run past its timeout fails with the timeout as
// cause; a panicking job fails its run, with the stack, and the replica goes
// on to the next slot.
func TestTimeoutAndPanic(t *testing.T) {
	e := newEnv(t)
	boom := func(ctx context.Context, run jobs.Run) error { panic("boom at " + run.Slot.Format(time.TimeOnly)) }
	table := []scheduler.Job{
		{Name: "slow", Schedule: "@every 1s", Timeout: 100 * time.Millisecond},
		{Name: "boom", Schedule: "@every 1s"},
	}
	first := nextSecond(500 * time.Millisecond)
	e.start("r", "", registry(t, map[string]jobs.Func{"slow": recorder(e.rdb, e.srv.Key("s"), 5*time.Second), "boom": boom}), table)
	sleepUntil(first.Add(2500 * time.Millisecond))
	for slot := first.Unix(); slot < first.Unix()+2; slot++ {
		slow, _ := e.record("slow", slot)
		if slow.State != locking.StateFailed || !strings.Contains(slow.Error, "jobs: timeout after 100ms") {
			t.Errorf("slow@%d: %+v, want failed by the timeout", slot, slow)
		}
		b, _ := e.record("boom", slot)
		if b.State != locking.StateFailed || !strings.Contains(b.Error, "panic: boom") || !strings.Contains(b.Error, "goroutine") {
			t.Errorf("boom@%d: %+v, want failed with the panic and its stack", slot, b)
		}
	}
}

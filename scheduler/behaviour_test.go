package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestMisfireIsRecordedNotStartedLate: a replica whose clock lags by 1s claims
// every slot 1s late; with a 500ms misfire grace, judged on Redis's clock,
// each slot is recorded missed and none starts.
func TestMisfireIsRecordedNotStartedLate(t *testing.T) {
	bubble(t, testMisfireIsRecordedNotStartedLate)
}

func testMisfireIsRecordedNotStartedLate(t *testing.T, e *harness) {
	key := "starts"
	table := []scheduler.Job{{Name: "tight", Schedule: "@every 1s", MisfireGrace: 500 * time.Millisecond}}
	first := nextSecond(500 * time.Millisecond)
	events := &eventLog{}
	e.startWith("laggard", replicaOpts{offset: -time.Second}, registry(t, map[string]jobs.Func{"tight": recorder(e.rdb, key, 0)}), table, events.option())
	sleepUntil(first.Add(3500 * time.Millisecond))
	if starts := e.starts(key); len(starts) != 0 {
		t.Fatalf("slots started late: %+v", starts)
	}
	for at := first.Unix(); at < first.Unix()+3; at++ {
		rec, ok := e.record("tight", at)
		if !ok || rec.State != slot.StateMissed || !strings.Contains(rec.Error, "past the misfire grace") {
			t.Errorf("slot %d: %+v (found %v), want missed past the grace", at, rec, ok)
		}
	}
	missed := map[int64]bool{}
	for _, ev := range events.of(t, scheduler.EventMissed) {
		missed[ev.Slot.Unix()] = ev.Replica == "laggard" && ev.Job == "tight" && strings.Contains(ev.Error, "past the misfire grace")
	}
	for at := first.Unix(); at < first.Unix()+3; at++ {
		if !missed[at] {
			t.Errorf("slot %d: no missed event (%v)", at, missed)
		}
	}
}

// TestRefusesToClaimAboveMaxSkew: a replica whose clock is 3s ahead (max_skew
// 2s) claims nothing; a healthy replica runs every slot.
func TestRefusesToClaimAboveMaxSkew(t *testing.T) { bubble(t, testRefusesToClaimAboveMaxSkew) }

func testRefusesToClaimAboveMaxSkew(t *testing.T, e *harness) {
	key := "starts"
	table := []scheduler.Job{{Name: "job", Schedule: "@every 1s"}}
	fns := map[string]jobs.Func{"job": recorder(e.rdb, key, 0)}
	events := &eventLog{}
	skewed := e.startWith("skewed", replicaOpts{offset: 3 * time.Second}, registry(t, fns), table, events.option())
	first := nextSecond(500 * time.Millisecond)
	sleepUntil(first)
	e.start("healthy", registry(t, fns), table, events.option())
	sleepUntil(first.Add(3500 * time.Millisecond))
	if drift := events.of(t, scheduler.EventDrift); len(drift) != 1 || drift[0].Replica != "skewed" || !strings.Contains(drift[0].Error, "above max_skew") {
		t.Fatalf("drift events: %+v; want one, from the skewed replica", drift)
	}

	offset, ok := skewed.s.Offset()
	if !ok || offset > -2900*time.Millisecond || offset < -3100*time.Millisecond {
		t.Fatalf("skewed replica measured offset %v (%v), want about -3s", offset, ok)
	}
	for _, s := range e.starts(key) {
		if s.replica != "healthy" {
			t.Fatalf("the skewed replica ran %+v", s)
		}
	}
	for at := first.Unix() + 1; at < first.Unix()+3; at++ {
		rec, ok := e.record("job", at)
		if !ok || rec.Owner != "healthy" || rec.State != slot.StateDone {
			t.Errorf("slot %d: %+v (%v), want done by the healthy replica", at, rec, ok)
		}
	}
}

// TestGracefulStop: stopping stops claiming at once; a run that ends within
// the shutdown grace is recorded done; one that does not is cancelled with
// ErrShutdown and recorded failed. Run returns when both have been recorded.
func TestGracefulStop(t *testing.T) { bubble(t, testGracefulStop) }

func testGracefulStop(t *testing.T, e *harness) {
	key := "starts"
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
	r := e.start("r", registry(t, map[string]jobs.Func{"long": long, "quick": recorder(e.rdb, key, 300*time.Millisecond)}),
		table, scheduler.WithShutdownGrace(grace))
	// Both jobs start at the same slot; stop well before the next one (2s later).
	sleepUntil(nextSecond(0).Add(50 * time.Millisecond)) // the bubble starts on an even second: the first slot
	if n := len(e.starts(key)); n != 2 {
		t.Fatalf("%d jobs started at the first slot, want 2", n)
	}
	starts := e.starts(key)
	if starts[0].slot != starts[1].slot {
		t.Fatalf("the jobs started at different slots: %+v", starts)
	}
	at := starts[0].slot

	stopped := time.Now()
	r.stop()
	took := time.Since(stopped)
	if took != grace {
		t.Fatalf("Run returned %v after the stop, want the %v grace (on the bubble's clock)", took, grace)
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
	quick, _ := e.record("quick", at)
	longRec, _ := e.record("long", at)
	if quick.State != slot.StateDone {
		t.Errorf("quick job: %+v, want done within the grace", quick)
	}
	if longRec.State != slot.StateFailed || !strings.Contains(longRec.Error, "shutdown") {
		t.Errorf("long job: %+v, want failed with the shutdown cause", longRec)
	}
}

// TestTimeoutAndPanic: a run past its timeout fails with the timeout as
// cause; a panicking job fails its run, with the stack, and the replica goes
// on to the next slot.
func TestTimeoutAndPanic(t *testing.T) { bubble(t, testTimeoutAndPanic) }

func testTimeoutAndPanic(t *testing.T, e *harness) {
	boom := func(ctx context.Context, run jobs.Run) error { panic("boom at " + run.Slot.Format(time.TimeOnly)) }
	table := []scheduler.Job{
		{Name: "slow", Schedule: "@every 1s", Timeout: 100 * time.Millisecond},
		{Name: "boom", Schedule: "@every 1s"},
	}
	first := nextSecond(500 * time.Millisecond)
	e.start("r", registry(t, map[string]jobs.Func{"slow": recorder(e.rdb, "s", 5*time.Second), "boom": boom}), table)
	sleepUntil(first.Add(2500 * time.Millisecond))
	for at := first.Unix(); at < first.Unix()+2; at++ {
		slow, _ := e.record("slow", at)
		if slow.State != slot.StateFailed || !strings.Contains(slow.Error, "jobs: timeout after 100ms") {
			t.Errorf("slow@%d: %+v, want failed by the timeout", at, slow)
		}
		b, _ := e.record("boom", at)
		if b.State != slot.StateFailed || !strings.Contains(b.Error, "panic: boom") || !strings.Contains(b.Error, "goroutine") {
			t.Errorf("boom@%d: %+v, want failed with the panic and its stack", at, b)
		}
	}
}

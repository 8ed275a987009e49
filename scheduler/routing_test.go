package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
)

// runLog records every run: its slot, replica and start delay (fake time,
// so a delay is exact).
type runLog struct {
	mu   sync.Mutex
	runs map[int64][]ran
}

type ran struct {
	replica string
	delay   time.Duration
}

func (l *runLog) fn() jobs.Func {
	return func(ctx context.Context, run jobs.Run) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.runs[run.Slot.Unix()] = append(l.runs[run.Slot.Unix()], ran{run.Replica, time.Since(run.Slot)})
		return nil
	}
}

// between returns, for the slots in [from, to), who ran each; it fails t
// when a slot ran twice or not at all.
func (l *runLog) between(t *testing.T, from, to time.Time) map[int64]ran {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int64]ran{}
	for at := from.Unix(); at < to.Unix(); at++ {
		switch rs := l.runs[at]; len(rs) {
		case 1:
			out[at] = rs[0]
		default:
			t.Errorf("slot %v ran %d times: %+v", time.Unix(at, 0).UTC(), len(rs), rs)
		}
	}
	return out
}

const hedge = 40 * time.Millisecond

// TestSpreadRouting: five replicas of a job every second. Once they have
// seen each other (one heartbeat), each slot is claimed first by its
// preferred replica, ahead of the slot's time, and won by it: every run
// starts at the slot's time, with no delay (the others would claim a hedge
// later), and each replica runs a fifth of the slots. The others, a hedge
// later, find the record with a plain read and send no claim.
func TestSpreadRouting(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		ids := []string{"r1", "r2", "r3", "r4", "r5"}
		claims := newLeadLog()
		for _, id := range ids {
			h.startWith(id, replicaOpts{claimer: claims.wrap}, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		}
		from := nextSecond(0).Add(10 * time.Second) // every replica has heartbeated since all started
		to := from.Add(300 * time.Second)
		sleepUntil(from.Add(-500 * time.Millisecond))
		claims.reset()
		sleepUntil(to.Add(-500 * time.Millisecond))
		if early, onTime, late := claims.split(t); early != 300 || onTime != 0 || late != 0 {
			t.Errorf("%d live claims ahead of the slots' time, %d at it and %d later; want 300 (one per slot, by its preferred replica), 0 and 0", early, onTime, late)
		}
		sleepUntil(to.Add(time.Second))
		synctest.Wait()
		per := map[string]int{}
		defer func() { t.Logf("runs per replica: %v", per) }()
		for at, r := range l.between(t, from, to) {
			per[r.replica]++
			if r.delay != 0 {
				t.Errorf("slot %v started %v late on %s: not by its preferred replica", time.Unix(at, 0).UTC(), r.delay, r.replica)
			}
		}
		for _, id := range ids {
			if n := per[id]; n < 45 || n > 75 {
				t.Errorf("%s ran %d of 300 slots, want 60 ± 15 (20%% ± 5%%): %v", id, n, per)
			}
		}
	})
}

// TestSpreadTracesEveryHedgedLoss: three replicas of four jobs every second,
// each with a tracing SDK. The two replicas that are not a slot's preferred
// one read its record a hedge later, in one read for the four jobs, and
// each of them traces every slot it lost that way: a "slot lost" root with
// a lock.peek child, per slot, not only the first of the read's batch
// (which alone tells a replica with no SDK that it traces nothing).
func TestSpreadTracesEveryHedgedLoss(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		fns := map[string]jobs.Func{}
		var table []scheduler.Job
		for i := range 4 {
			name := fmt.Sprint("j", i)
			fns[name] = func(context.Context, jobs.Run) error { return nil }
			table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s"})
		}
		ids := []string{"r1", "r2", "r3"}
		recs := map[string]*tracetest.SpanRecorder{}
		for _, id := range ids {
			recs[id] = tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recs[id]))
			h.startWith(id, replicaOpts{}, registry(t, fns), table, scheduler.WithHedge(hedge), scheduler.WithTracerProvider(tp))
		}
		from := nextSecond(0).Add(10 * time.Second) // every replica has heartbeated since all started
		to := from.Add(20 * time.Second)
		sleepUntil(to.Add(time.Second))
		synctest.Wait()
		type key struct{ job, slot string }
		lost := map[key]int{}   // "slot lost" roots with a lock.peek child
		traced := map[key]int{} // every root of the slot
		for _, id := range ids {
			spans := recs[id].Ended()
			peeks := map[string]bool{} // span IDs of the roots that have a lock.peek child
			for _, s := range spans {
				if s.Name() == "lock.peek" {
					peeks[s.Parent().SpanID().String()] = true
				}
			}
			for _, s := range spans {
				if s.Parent().IsValid() {
					continue
				}
				var k key
				for _, a := range s.Attributes() {
					switch a.Key {
					case "slotcron.job":
						k.job = a.Value.AsString()
					case "slotcron.slot":
						k.slot = a.Value.AsString()
					}
				}
				at, err := time.Parse(time.RFC3339, k.slot)
				if err != nil || at.Before(from) || !at.Before(to) {
					continue
				}
				traced[k]++
				if s.Name() == "slot lost" && peeks[s.SpanContext().SpanID().String()] {
					lost[k]++
				}
			}
		}
		if len(traced) != 4*20 {
			t.Errorf("%d slots traced, want 80 (4 jobs, 20 s)", len(traced))
		}
		for k, n := range traced {
			if n != 3 || lost[k] != 2 {
				t.Errorf("%s at %s: %d root spans, %d of them a hedged loss read with lock.peek; want 3 and 2", k.job, k.slot, n, lost[k])
			}
		}
	})
}

// TestRaceRouting: under routing race every replica claims each slot, ahead
// of its time, as before spread routing; each slot still runs once. A lone
// replica's claims are plain ones; once it has company, every claim is
// marked contested, as all but one will find the slot's record (what the
// store then does: slotstore's TestContested tests).
func TestRaceRouting(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s", Routing: scheduler.RoutingRace}}
		claims := newLeadLog()
		start := func(id string) {
			h.startWith(id, replicaOpts{claimer: claims.wrap}, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		}
		start("r1")
		alone := nextSecond(0).Add(2 * time.Second)
		sleepUntil(alone.Add(-500 * time.Millisecond))
		claims.reset()
		sleepUntil(alone.Add(5*time.Second - 500*time.Millisecond))
		if n, contested := claims.contested(); n != 5 || contested != 0 {
			t.Errorf("one replica: %d live claims, %d of them contested; want 5, none", n, contested)
		}
		start("r2")
		start("r3")
		from := nextSecond(0).Add(10 * time.Second)
		to := from.Add(20 * time.Second)
		sleepUntil(from.Add(-500 * time.Millisecond))
		claims.reset()
		sleepUntil(to.Add(-500 * time.Millisecond)) // the claims of the slots in [from, to)
		synctest.Wait()
		l.between(t, from, to)
		if early, onTime, late := claims.split(t); early != 3*20 || onTime != 0 || late != 0 {
			t.Errorf("race: %d claims ahead of the slot's time, %d at it and %d later; want 60, 0 and 0", early, onTime, late)
		}
		if n, contested := claims.contested(); contested != n {
			t.Errorf("three replicas: %d of %d live claims contested, want all", contested, n)
		}
	})
}

// TestSpreadSurvivesALostPreferred: one of three replicas is cut off from
// Redis. The slots it was preferred for start one hedge late, on another
// replica, until the registry drops it (three heartbeats); from then on
// every slot starts on time again. Every slot starts once.
func TestSpreadSurvivesALostPreferred(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		var cut *replica
		claims := newLeadLog()
		for _, id := range []string{"r1", "r2", "r3"} {
			r := h.startWith(id, replicaOpts{claimer: claims.wrap}, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
			if id == "r2" {
				cut = r
			}
		}
		from := nextSecond(0).Add(10 * time.Second)
		sleepUntil(from.Add(-500 * time.Millisecond))
		cut.net.freeze()
		stale := from.Add(3*scheduler.DefaultHeartbeatEvery + scheduler.DefaultHeartbeatEvery) // dropped, and seen dropped
		to := stale.Add(20 * time.Second)
		sleepUntil(to.Add(time.Second))
		cut.net.thaw()
		synctest.Wait()
		late := 0
		for at, r := range l.between(t, from, to) {
			switch {
			case r.replica == "r2":
				t.Errorf("slot %v ran on the cut-off replica", time.Unix(at, 0).UTC())
			case r.delay > hedge+time.Millisecond:
				t.Errorf("slot %v started %v late: more than one hedge (%v)", time.Unix(at, 0).UTC(), r.delay, hedge)
			case r.delay > 0 && !time.Unix(at, 0).Before(stale):
				t.Errorf("slot %v started %v late, after the registry dropped the cut-off replica", time.Unix(at, 0).UTC(), r.delay)
			case r.delay > 0:
				late++
			}
		}
		if late == 0 {
			t.Errorf("no slot started late while r2 was cut off: were any of its slots preferred to it?")
		}
		if _, _, late := claims.split(t); late == 0 || claims.noID() != 0 {
			t.Errorf("%d hedged claims sent, %d claims sent without a token or run ID; want some, and none", late, claims.noID())
		}
		t.Logf("%d slots started one hedge late while r2 was cut off and still listed live", late)
	})
}

// TestSpreadTakesInANewReplica: a replica that joins gets its share from
// the heartbeat after it started, without a slot running twice or late.
func TestSpreadTakesInANewReplica(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		for _, id := range []string{"r1", "r2"} {
			h.start(id, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		}
		from := nextSecond(0).Add(10 * time.Second)
		sleepUntil(from)
		h.start("r3", registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		seen := from.Add(2 * scheduler.DefaultHeartbeatEvery) // every replica has heartbeated since
		to := seen.Add(60 * time.Second)
		sleepUntil(to.Add(time.Second))
		synctest.Wait()
		runs := l.between(t, from, to)
		r3 := 0
		for at, r := range runs {
			if r.replica == "r3" {
				r3++
			}
			if r.delay > hedge+time.Millisecond || r.delay > 0 && !time.Unix(at, 0).Before(seen) {
				t.Errorf("slot %v started %v late on %s", time.Unix(at, 0).UTC(), r.delay, r.replica)
			}
		}
		if r3 < 10 {
			t.Errorf("the new replica ran %d slots of %d: it did not get its share", r3, len(runs))
		}
	})
}

// TestSpreadAfterAReplicaLeaves: a replica that stops leaves the registry;
// from the others' next heartbeat on, no slot waits for it.
func TestSpreadAfterAReplicaLeaves(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		var leaving *replica
		for _, id := range []string{"r1", "r2", "r3"} {
			r := h.start(id, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
			if id == "r2" {
				leaving = r
			}
		}
		from := nextSecond(0).Add(10 * time.Second)
		sleepUntil(from.Add(-500 * time.Millisecond))
		leaving.stop()
		seen := from.Add(scheduler.DefaultHeartbeatEvery) // the others' next heartbeat
		to := seen.Add(30 * time.Second)
		sleepUntil(to.Add(time.Second))
		synctest.Wait()
		for at, r := range l.between(t, from, to) {
			switch {
			case r.replica == "r2":
				t.Errorf("slot %v ran on the replica that left", time.Unix(at, 0).UTC())
			case r.delay > hedge+time.Millisecond || r.delay > 0 && !time.Unix(at, 0).Before(seen):
				t.Errorf("slot %v started %v late on %s", time.Unix(at, 0).UTC(), r.delay, r.replica)
			}
		}
		reg, err := h.store.Registry(context.Background(), 3*scheduler.DefaultHeartbeatEvery)
		if err != nil || len(reg.Replicas) != 2 {
			t.Errorf("registry after r2 left: %+v, %v", reg.Replicas, err)
		}
	})
}

// TestSpreadJudgesAPeerByItsMaxSkew: mid-deploy, one of three replicas runs
// with max_skew 500ms (the others with the default 2s) and its clock is 1s
// ahead of Redis's: it refuses every claim. The others judge it by its own
// limit, which it publishes, so it is no slot's preferred replica: every
// slot starts on time on one of them, none a hedge late.
func TestSpreadJudgesAPeerByItsMaxSkew(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		l := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		for _, id := range []string{"r1", "r2"} {
			h.start(id, registry(t, map[string]jobs.Func{"tick": l.fn()}), table, scheduler.WithHedge(hedge))
		}
		h.startWith("strict", replicaOpts{offset: time.Second}, registry(t, map[string]jobs.Func{"tick": l.fn()}), table,
			scheduler.WithHedge(hedge), scheduler.WithSkewLimits(250*time.Millisecond, 500*time.Millisecond))
		from := nextSecond(0).Add(10 * time.Second) // every replica has heartbeated since all started
		to := from.Add(60 * time.Second)
		sleepUntil(to.Add(time.Second))
		synctest.Wait()
		late := 0
		for at, r := range l.between(t, from, to) {
			switch {
			case r.replica == "strict":
				t.Errorf("slot %v ran on the replica whose clock is past its max_skew", time.Unix(at, 0).UTC())
			case r.delay > 0:
				late++
			}
		}
		if late > 0 {
			t.Errorf("%d of 60 slots started late: routed to the replica that refuses to claim", late)
		}
	})
}

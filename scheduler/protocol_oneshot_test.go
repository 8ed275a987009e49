package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestOlderProtocolRefusesOneShots: a backfill or a manual run from the
// command line (a Scheduler that does not Run the table) claims nothing
// while a replica of an older slot protocol is live, and says so: that
// replica does not see this protocol's leases, so a manual run could start
// beside one of its runs, and the two protocols keep separate fences. Once
// it has left, both run.
func TestOlderProtocolRefusesOneShots(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(100 * time.Millisecond)}
		table := []scheduler.Job{{Name: "draw", Schedule: "@every 1s"}}
		oneShot := func() *scheduler.Scheduler {
			s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		past := time.Now().Truncate(time.Second).Add(-time.Minute)
		slots := []time.Time{past, past.Add(time.Second), past.Add(2 * time.Second)}
		leave := h.olderReplica("old-1")

		_, out, err := oneShot().RunManual(context.Background(), "draw", slot.Manual{ID: "once"})
		if !errors.Is(err, scheduler.ErrOlderProtocol) || !strings.Contains(err.Error(), "old-1") || out.Outcome != "" {
			t.Fatalf("RunManual beside protocol 1: %+v, %v", out, err)
		}
		res, err := oneShot().Backfill(context.Background(), "draw", slots, 1)
		if !errors.Is(err, scheduler.ErrOlderProtocol) {
			t.Fatalf("Backfill beside protocol 1: %v", err)
		}
		for i, r := range res {
			if r.Outcome != "" {
				t.Errorf("slot %d claimed beside protocol 1: %+v", i, r)
			}
		}
		for _, at := range slots {
			if rec, ok := h.record("draw", at.Unix()); ok {
				t.Errorf("slot %v has a record: %+v", at, rec)
			}
		}
		if n := m.count("m:once"); n != 0 {
			t.Fatalf("the manual slot ran %d times beside protocol 1", n)
		}

		leave()
		_, out, err = oneShot().RunManual(context.Background(), "draw", slot.Manual{ID: "once"})
		if err != nil || out.Outcome != slot.OutcomeWon || out.State != slot.StateDone {
			t.Fatalf("RunManual once protocol 1 left: %+v, %v", out, err)
		}
		res, err = oneShot().Backfill(context.Background(), "draw", slots, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Outcome != slot.OutcomeWon || r.State != slot.StateDone {
				t.Errorf("slot %d: %+v", i, r)
			}
		}
	})
}

// TestOlderProtocolStopsABackfill: a replica of an older protocol that
// starts during a long backfill (a rollback) stops it within one heartbeat
// period, as it stops the replicas that run the table: the slots not
// claimed yet are left without a record, and the backfill says why.
func TestOlderProtocolStopsABackfill(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const n, hold = 40, time.Second
		var started atomic.Int64
		var joined atomic.Int64 // the runs started before the older replica joined
		joinAt := 1             // just after the backfill read the registry
		leave := make(chan func(), 1)
		fns := map[string]jobs.Func{"draw": func(ctx context.Context, run jobs.Run) error {
			if started.Add(1) == int64(joinAt) {
				joined.Store(int64(joinAt))
				leave <- h.olderReplica("old-1")
			}
			time.Sleep(hold)
			return nil
		}}
		table := []scheduler.Job{{Name: "draw", Schedule: "@every 1s"}}
		s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
		if err != nil {
			t.Fatal(err)
		}
		past := time.Now().Truncate(time.Second).Add(-time.Hour)
		slots := make([]time.Time, n)
		for i := range slots {
			slots[i] = past.Add(time.Duration(i) * time.Second)
		}
		res, err := s.Backfill(context.Background(), "draw", slots, 1)
		select {
		case f := <-leave:
			defer f()
		default:
			t.Fatal("the older replica never joined")
		}
		if !errors.Is(err, scheduler.ErrOlderProtocol) {
			t.Fatalf("Backfill: %v", err)
		}
		// Claims go on until the registry is read again, a heartbeat period
		// (5 s) after the read before the first claim: the runs of seconds
		// 1 to 4 start after the join.
		after := started.Load() - joined.Load()
		if after > int64(scheduler.DefaultHeartbeatEvery/hold)-1 {
			t.Errorf("%d runs started after the older replica joined", after)
		}
		ran := 0
		for i, r := range res {
			_, ok := h.record("draw", slots[i].Unix())
			switch {
			case !r.Slot.Equal(slots[i]):
				t.Errorf("result %d is of slot %v, not %v", i, r.Slot, slots[i])
			case r.Outcome == slot.OutcomeWon && ok:
				ran++
			case r.Outcome == "" && !ok:
			default:
				t.Errorf("slot %d: %+v, has a record: %v", i, r, ok)
			}
		}
		if int64(ran) != started.Load() || ran >= n {
			t.Errorf("%d slots won, %d runs started, of %d", ran, started.Load(), n)
		}
	})
}

// unreadableRegistry is a store whose registry cannot be read.
type unreadableRegistry struct{ *slotstore.Store }

func (unreadableRegistry) Registry(context.Context, time.Duration) (slot.Registry, error) {
	return slot.Registry{}, errors.New("registry unreachable")
}

// TestOneShotThatCannotReadTheRegistry: a manual run that cannot tell
// whether a replica of an older protocol is live claims nothing, and says
// why.
func TestOneShotThatCannotReadTheRegistry(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(100 * time.Millisecond)}
		s, err := scheduler.New(unreadableRegistry{h.store}, registry(t, fns),
			scheduler.WithJobs(scheduler.Job{Name: "draw", Schedule: "@every 1s"}), scheduler.WithReplicaID("cli"))
		if err != nil {
			t.Fatal(err)
		}
		_, out, err := s.RunManual(context.Background(), "draw", slot.Manual{ID: "once"})
		if err == nil || !strings.Contains(err.Error(), "registry unreachable") || out.Outcome != "" {
			t.Fatalf("RunManual: %+v, %v", out, err)
		}
		if n := m.count("m:once"); n != 0 {
			t.Fatalf("ran %d times", n)
		}
	})
}

// TestOlderProtocolRefusesATrigger: a manual slot asked of a running
// replica while a replica of an older protocol is live, whether it was live
// when this one started (an upgrade) or started later (a rollback), is
// refused with an error that names it, and nothing runs.
func TestOlderProtocolRefusesATrigger(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(100 * time.Millisecond)}
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *"}}
		trigger := func(r *replica, id string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := r.s.Trigger(ctx, "draw", slot.Manual{ID: id})
			return err
		}

		leave := h.olderReplica("old-1")
		up := h.start("upgrade", registry(t, fns), table)
		time.Sleep(time.Second) // its first heartbeat has found old-1
		if err := trigger(up, "up"); !errors.Is(err, scheduler.ErrOlderProtocol) || !strings.Contains(err.Error(), "old-1") {
			t.Fatalf("Trigger while waiting for protocol 1 to leave: %v", err)
		}
		leave()
		up.stop()

		back := h.start("rollback", registry(t, fns), table)
		time.Sleep(time.Second)
		if err := trigger(back, "before"); err != nil {
			t.Fatal(err)
		}
		leave = h.olderReplica("old-2")
		defer leave()
		time.Sleep(scheduler.DefaultHeartbeatEvery + time.Second) // its next heartbeat finds old-2
		if err := trigger(back, "back"); !errors.Is(err, scheduler.ErrOlderProtocol) || !strings.Contains(err.Error(), "old-2") {
			t.Fatalf("Trigger after protocol 1 came back: %v", err)
		}
		time.Sleep(time.Second)
		if m.count("m:up") != 0 || m.count("m:back") != 0 || m.count("m:before") != 1 {
			t.Fatalf("runs: %v", m.runs)
		}
	})
}

// TestOlderProtocolStopsABusyBackfill: a backfill waiting for a run that
// holds the job (overlap skip) when a replica of an older protocol starts
// stops too, and reports the slot it waited for as not reached.
func TestOlderProtocolStopsABusyBackfill(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		m := &manualRuns{runs: map[string]int{}, by: map[string]string{}}
		fns := map[string]jobs.Func{"draw": m.fn(30 * time.Second)}
		table := []scheduler.Job{{Name: "draw", Schedule: "0 0 12 * * *", Retention: 72 * time.Hour}}
		a := h.start("a", registry(t, fns), table)
		time.Sleep(time.Second)
		if tr, err := a.s.Trigger(context.Background(), "draw", slot.Manual{ID: "hold"}); err != nil || tr.Outcome != slot.OutcomeWon {
			t.Fatalf("Trigger: %+v, %v", tr, err)
		}
		s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
		if err != nil {
			t.Fatal(err)
		}
		leave := make(chan func(), 1)
		go func() {
			time.Sleep(2 * time.Second) // the backfill is waiting for the run of "hold"
			leave <- h.olderReplica("old-1")
		}()
		noon := time.Now().Truncate(24 * time.Hour).Add(-12 * time.Hour) // yesterday's
		slots := []time.Time{noon.Add(-24 * time.Hour), noon}
		res, err := s.Backfill(context.Background(), "draw", slots, 1)
		defer (<-leave)()
		if !errors.Is(err, scheduler.ErrOlderProtocol) {
			t.Fatalf("Backfill: %v", err)
		}
		for i, r := range res {
			if r.Outcome != "" || !r.Slot.Equal(slots[i]) {
				t.Errorf("slot %d: %+v", i, r)
			}
			if _, ok := h.record("draw", slots[i].Unix()); ok {
				t.Errorf("slot %d has a record", i)
			}
		}
	})
}

// hangingClaims is a store whose claims hang until their timeout (a Redis
// that stopped answering), and which notes when claims and registry reads
// were sent.
type hangingClaims struct {
	*slotstore.Store
	mu     sync.Mutex
	reads  []time.Time
	claims []time.Time
}

func (c *hangingClaims) Registry(ctx context.Context, stale time.Duration) (slot.Registry, error) {
	c.mu.Lock()
	c.reads = append(c.reads, time.Now())
	c.mu.Unlock()
	return c.Store.Registry(ctx, stale)
}

func (c *hangingClaims) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	c.mu.Lock()
	c.claims = append(c.claims, time.Now())
	c.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestOlderProtocolStopsAClaimsRetries: a backfill's claim that Redis does
// not answer is sent again, but not past a heartbeat period after the
// registry was last read: a retry is a claim too, and a replica of an
// older protocol may have started meanwhile.
func TestOlderProtocolStopsAClaimsRetries(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const every = 12 * time.Second // the claims time out after 5 s: two retries fit in a period
		fns := map[string]jobs.Func{"draw": func(context.Context, jobs.Run) error { return nil }}
		c := &hangingClaims{Store: h.store}
		s, err := scheduler.New(c, registry(t, fns), scheduler.WithJobs(scheduler.Job{Name: "draw", Schedule: "@every 1s"}),
			scheduler.WithReplicaID("cli"), scheduler.WithHeartbeatEvery(every))
		if err != nil {
			t.Fatal(err)
		}
		leave := make(chan func(), 1)
		go func() {
			time.Sleep(time.Second) // the first claim hangs
			leave <- h.olderReplica("old-1")
		}()
		_, err = s.Backfill(context.Background(), "draw", []time.Time{time.Now().Truncate(time.Second).Add(-time.Hour)}, 1)
		defer (<-leave)()
		if !errors.Is(err, scheduler.ErrOlderProtocol) {
			t.Fatalf("Backfill: %v", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.claims) < 2 {
			t.Fatalf("%d claims sent: the hung claim was not sent again", len(c.claims))
		}
		for _, at := range c.claims {
			last := time.Time{}
			for _, r := range c.reads {
				if !r.After(at) {
					last = r
				}
			}
			if at.Sub(last) >= every {
				t.Errorf("a claim sent %v after the registry was last read", at.Sub(last))
			}
		}
	})
}

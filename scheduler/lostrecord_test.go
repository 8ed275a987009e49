package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestAFailoverBetweenAClaimAheadAndItsSlot: three replicas, spread
// routing. The slot's preferred replica wins it ahead of its time; then
// Redis fails over to a replica that lagged (the slot's record and the
// job's state as they were before the claim; the epoch key, written long
// ago, survives, so the epoch probe sees nothing). A hedger finds no record
// and runs the slot too: asynchronous replication allows that (the README's
// guarantees), but not in silence. The first run's finish (a job shorter
// than a renewal period) or its renewal (a longer one) finds another run's
// record that no takeover of its own wrote, and says so: a data_loss event,
// an ERROR. Both used to read it as a takeover, at WARN.
func TestAFailoverBetweenAClaimAheadAndItsSlot(t *testing.T) {
	for _, hold := range []time.Duration{500 * time.Millisecond, 7 * time.Second} {
		t.Run(fmt.Sprintf("a job of %v", hold), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				ctx := context.Background()
				key := "starts"
				// Slots at 2, 12, 22... s; renewals every 5 s from the start, at 0
				// s: none between the failover and the hedger's claim.
				table := []scheduler.Job{{Name: "j", Schedule: "2/10 * * * * *"}}
				ev := &eventLog{}
				for _, id := range []string{"r1", "r2", "r3"} {
					h.start(id, registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, hold)}), table,
						scheduler.WithHedge(hedge), scheduler.WithClaimAhead(200*time.Millisecond), scheduler.WithRenewEvery(5*time.Second),
						ev.option())
				}
				at := time.Now().Truncate(10 * time.Second).Add(22 * time.Second)
				stateKey := "sc:{j}:state"
				sleepUntil(at.Add(-300 * time.Millisecond))
				before := h.rdb.HGetAll(ctx, stateKey).Val()
				sleepUntil(at.Add(-100 * time.Millisecond))
				rec, ok := h.record("j", at.Unix())
				if !ok || rec.State != slot.StateRunning {
					t.Fatalf("the slot was not won ahead: %+v %v", rec, ok)
				}
				// The failover: the new master lacks the last 200ms of writes.
				h.rdb.Del(ctx, slotstore.RecordKey("sc", "j", at), stateKey)
				h.rdb.HSet(ctx, stateKey, before)
				sleepUntil(at.Add(hold + 3*time.Second))
				synctest.Wait()
				var by []string
				for _, s := range h.starts(key) {
					if s.slot == at.Unix() {
						by = append(by, s.replica)
					}
				}
				if len(by) != 2 {
					t.Fatalf("the slot started %d times (%v), not twice: the test shows nothing", len(by), by)
				}
				losses := ev.of(t, scheduler.EventDataLoss)
				if len(losses) != 1 {
					t.Fatalf("the slot started twice (%v) after a failover; data_loss events %+v, want 1", by, losses)
				}
				if rec2, _ := h.record("j", at.Unix()); rec2.Owner == rec.Owner {
					t.Errorf("record %+v: the first run wrote over the record that took its place", rec2)
				}
			})
		})
	}
}

// TestNoStartOnALeaseThatRanOutAtItsSlot: a slot won 200ms ahead; the
// replica is then cut off, so its renewals fail, and the lease's validity
// runs out at the very instant the run's wait for the slot ends (what a
// pause of the process across both deadlines makes likely: both timers are
// due when it resumes). The job must not start, whichever timer fires
// first; it used to in about half of the rounds.
func TestNoStartOnALeaseThatRanOutAtItsSlot(t *testing.T) {
	for i := range 30 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				var mu sync.Mutex
				var causes []error
				at := nextSecond(0).Add(5 * time.Second)
				fn := func(ctx context.Context, run jobs.Run) error {
					if run.Slot.Equal(at) {
						mu.Lock()
						causes = append(causes, context.Cause(ctx))
						mu.Unlock()
					}
					return nil
				}
				ttl := 204040404 * time.Nanosecond // SafeTTL(ttl) is exactly 200ms, the lead
				table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: ttl}}
				r := h.start("r1", registry(t, map[string]jobs.Func{"j": fn}), table,
					scheduler.WithClaimAhead(200*time.Millisecond))
				sleepUntil(at.Add(-199 * time.Millisecond))
				if rec, ok := h.record("j", at.Unix()); !ok || rec.State != slot.StateRunning {
					t.Fatalf("the slot was not won ahead: %+v %v", rec, ok)
				}
				r.net.freeze()
				sleepUntil(at.Add(time.Second))
				r.net.thaw()
				sleepUntil(at.Add(2 * time.Second))
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if len(causes) > 0 {
					t.Errorf("the job started on a lease whose validity ended at the slot's time (its context's cause then: %v)", causes[0])
				}
			})
		})
	}
}

// heldWin is a Claimer whose first won claim's answer is held until the
// test releases it, or until the claim's context ends (then its answers
// are errors, as go-redis gives a call cut off in flight: Redis ran it).
type heldWin struct {
	*slotstore.Store
	once    atomic.Bool
	won     chan int64 // the slot of that claim, unix seconds
	release chan struct{}
}

func (s *heldWin) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	res, err := s.Store.Claim(ctx, claims)
	for i, r := range res {
		if r.Outcome == slot.OutcomeWon && s.once.CompareAndSwap(false, true) {
			s.won <- claims[i].Slot.Unix()
			select {
			case <-s.release:
			case <-ctx.Done():
				cut := make([]slot.Result, len(res))
				for k := range cut {
					cut[k] = slot.Result{Err: ctx.Err()}
				}
				return cut, err
			}
			break
		}
	}
	return res, err
}

// TestAStopDoesNotCutOffAClaimInFlight: a replica is stopped while a claim
// that Redis has run, and won, is on its way back. Its answer is applied
// as any other: the slot runs, within the shutdown grace, and is recorded
// done. It used to be dropped as a failed claim: the slot stayed running,
// to be recorded abandoned by a takeover though it never started (here, a
// lone replica: running until its next start).
func TestAStopDoesNotCutOffAClaimInFlight(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := "starts"
		held := &heldWin{won: make(chan int64, 1), release: make(chan struct{})}
		table := []scheduler.Job{{Name: "j", Schedule: "@every 10s"}}
		r := h.startWith("r1", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { held.Store = s; return held }},
			registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 500*time.Millisecond)}), table)
		at := <-held.won
		go r.stop()
		synctest.Wait() // the stop waits for the claim, or the claim was cut off
		close(held.release)
		<-r.done
		var by []string
		for _, s := range h.starts(key) {
			if s.slot == at {
				by = append(by, s.replica)
			}
		}
		rec, ok := h.record("j", at)
		if !ok || rec.State != slot.StateDone || len(by) != 1 {
			t.Errorf("slot %d, won as the replica stopped: record %s (%v), started by %v; want done, started once", at, rec.State, ok, by)
		}
	})
}

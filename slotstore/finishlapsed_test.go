package slotstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestAFinishSaysTheLeaseWasLostUnseen: Redis holds a run's lease lapsed
// while the run's replica still holds it on its own clock (a failover that
// lost renewals, Redis's clock stepped), and another run takes the job. The
// run's finish, its lease's time still ahead, writes the run's end (the
// record is its own) and says the lease was lost, so that its replica
// reports it; so does a finish after a renewal that found the loss as the
// run returned. A finish whose record was taken over says it too, beside
// ErrNotHeld. A finish on a lease that holds says nothing of the kind.
func TestAFinishSaysTheLeaseWasLostUnseen(t *testing.T) {
	for _, then := range []string{"finished", "renewed, then finished", "taken over"} {
		t.Run(then, func(t *testing.T) {
			_, rdb, s := newSlots(t)
			ctx := context.Background()
			at := time.Unix(1_700_200_000, 0)
			run := claimOne(t, s, live("j", at, "r1"))
			if run.Outcome != slot.OutcomeWon {
				t.Fatalf("claim: %+v", run)
			}
			lapse(t, rdb, s, "j", "lease")
			if then == "taken over" {
				if r := claimOne(t, s, takeover("j", at, "r2", false, 1)); r.Outcome != slot.OutcomeAbandoned {
					t.Fatalf("r2's takeover: %+v", r)
				}
			} else if r := claimOne(t, s, manual("j", "m1", "r2")); r.Outcome != slot.OutcomeWon {
				t.Fatalf("r2's manual run: %+v", r)
			}
			if then == "renewed, then finished" {
				if errs := s.Renew(ctx, []slot.Lease{run.Lease}); !errors.Is(errs[0], slot.ErrLeaseLost) {
					t.Fatalf("the renewal: %v, want ErrLeaseLost", errs[0])
				}
			}
			err := finish(s, run.Lease, slot.StateDone, "")
			if !errors.Is(err, slot.ErrLeaseLost) {
				t.Errorf("the finish: %v, want an error wrapping ErrLeaseLost", err)
			}
			rec, _, _ := s.Record(ctx, "j", at)
			if then == "taken over" {
				if !errors.Is(err, slot.ErrNotHeld) || rec.State != slot.StateAbandoned {
					t.Errorf("the finish: %v, the record %s; want ErrNotHeld, the record abandoned", err, rec.State)
				}
				return
			}
			if errors.Is(err, slot.ErrNotHeld) || rec.State != slot.StateDone {
				t.Errorf("the finish: %v, the record %s; want the record done", err, rec.State)
			}
			// Its reply lost, the finish is sent again: it says the same.
			if again := finish(s, run.Lease, slot.StateDone, ""); !errors.Is(again, slot.ErrLeaseLost) || errors.Is(again, slot.ErrNotHeld) {
				t.Errorf("the finish sent again: %v, want the loss said again", again)
			}
		})
	}
	t.Run("held", func(t *testing.T) {
		_, _, s := newSlots(t)
		run := claimOne(t, s, live("j", time.Unix(1_700_200_000, 0), "r1"))
		if err := finish(s, run.Lease, slot.StateDone, ""); err != nil {
			t.Errorf("the finish of a lease that holds: %v", err)
		}
		if err := finish(s, run.Lease, slot.StateDone, ""); err != nil { // sent again, its reply lost
			t.Errorf("the same finish sent again: %v", err)
		}
	})
}

package slotstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestAResentWinEndsItsSlotsTurn: a claim or a takeover whose reply was
// lost, sent again once its lease had lapsed and a later slot's run had
// come and gone, wins its slot back; a watcher's retry meanwhile found the
// job held and set a turn for that slot. The resent run's finish, its lease
// still holding, must end the turn: nothing is left to retry, and a turn
// left standing had every later slot recorded skipped, "held for the retry
// of" a slot that is done.
func TestAResentWinEndsItsSlotsTurn(t *testing.T) {
	for _, by := range []string{"claim", "takeover"} {
		t.Run(by, func(t *testing.T) {
			_, rdb, s := newSlots(t)
			ctx := context.Background()
			job := "resent-" + by
			s1 := time.Unix(1_700_100_000, 0)
			first := live(job, s1, "a")
			first.Token = "tok-a"
			if r := claimOne(t, s, first); r.Outcome != slot.OutcomeWon {
				t.Fatalf("S1's claim: %+v", r)
			}
			resend := first
			if by == "takeover" {
				// a's run died; c's retry takes S1 over, and its reply is lost.
				lapse(t, rdb, s, job, "lease")
				resend = takeover(job, s1, "c", true, 3)
				resend.Token = "tok-c"
				if r := claimOne(t, s, resend); r.Outcome != slot.OutcomeWon || r.Attempt != 2 {
					t.Fatalf("c's retry of S1: %+v", r)
				}
			}
			lapse(t, rdb, s, job, "lease") // the winner is cut off past its TTL
			s2 := live(job, s1.Add(10*time.Second), "b")
			won2 := claimOne(t, s, s2)
			if won2.Outcome != slot.OutcomeWon {
				t.Fatalf("S2's claim: %+v", won2)
			}
			if r := claimOne(t, s, takeover(job, s1, "d", true, 5)); r.Outcome != slot.OutcomeBusy {
				t.Fatalf("d's retry of S1 while S2 runs: %+v, want busy (it sets S1's turn)", r)
			}
			if err := finish(s, won2.Lease, slot.StateDone, ""); err != nil {
				t.Fatal(err)
			}
			back := claimOne(t, s, resend) // the lost reply's claim, sent again
			if back.Outcome != slot.OutcomeWon {
				t.Fatalf("the %s sent again: %+v, want won again", by, back)
			}
			if err := finish(s, back.Lease, slot.StateDone, ""); err != nil {
				t.Fatal(err)
			}
			if who, at, ttl, err := s.Turn(ctx, job); err != nil || who != "" {
				t.Errorf("S1 is done, yet the job's turn stands: %q for %v, %v left (%v)", who, at, ttl, err)
			}
			s3 := s1.Add(20 * time.Second)
			if r := claimOne(t, s, live(job, s3, "b")); r.Outcome != slot.OutcomeWon {
				rec, _, _ := s.Record(ctx, job, s3)
				t.Errorf("S3, with nothing running: %v (%q), want won", r.Outcome, rec.Error)
			}
		})
	}
}

package slotstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestAClaimThatClosedItsSlotIsAnsweredTheSameWhenSentAgain: a claim that
// recorded its slot missed, skipped or paused, its reply lost (Redis froze
// past the claim's timeout, and ran it when it came back), is sent again
// with its token. It gets the same answer, so that its replica reports the
// slot as the first answer would have (a missed slot's event, WARN and
// metric). It used to get "lost" to a record of its own replica, logged at
// DEBUG: the slot missed with no word of it. Another claim of the same
// replica (another token) still finds the slot lost. Found by review.
func TestAClaimThatClosedItsSlotIsAnsweredTheSameWhenSentAgain(t *testing.T) {
	for _, tc := range []struct {
		want      slot.Outcome
		contested bool // the claim reads the record first (routing race)
	}{{slot.OutcomeMissed, false}, {slot.OutcomeSkipped, false}, {slot.OutcomePaused, false}, {slot.OutcomeMissed, true}} {
		want := tc.want
		t.Run(fmt.Sprintf("%s/contested=%v", want, tc.contested), func(t *testing.T) {
			_, _, s := newSlots(t)
			ctx := context.Background()
			job := "closed-" + string(want)
			at := time.Unix(1_700_300_000, 0)
			c := live(job, at, "r1")
			c.Token, c.Contested = "tok-1", tc.contested
			var holder slot.Result
			switch want {
			case slot.OutcomeMissed:
				c.Deadline = time.Now().Add(-time.Second) // past the misfire grace
			case slot.OutcomeSkipped:
				holder = claimOne(t, s, live(job, at.Add(-10*time.Second), "r0")) // a run that holds the job
			case slot.OutcomePaused:
				if _, _, err := s.Pause(ctx, job, "freeze", "ops"); err != nil {
					t.Fatal(err)
				}
			}
			first := claimOne(t, s, c)
			if first.Outcome != want {
				t.Fatalf("the claim: %+v, want %s", first, want)
			}
			again := claimOne(t, s, c) // its reply was lost: the same claim, sent again
			if again.Outcome != want || again.Late != first.Late || again.Reason != first.Reason || again.Holder != first.Holder ||
				!again.HolderSlot.Equal(first.HolderSlot) {
				t.Errorf("sent again: %+v; want the first answer again: %+v", again, first)
			}
			if want == slot.OutcomeSkipped && (again.Holder != "r0" || again.Wait <= 0) {
				t.Errorf("sent again while r0's run (%s) holds the job: holder %q, wait %v", holder.Outcome, again.Holder, again.Wait)
			}
			other := c
			other.Token = "tok-2"
			if r := claimOne(t, s, other); r.Outcome != slot.OutcomeLost || r.State != slot.State(want) {
				t.Errorf("another claim of r1: %+v, want lost to the %s record", r, want)
			}
		})
	}
}

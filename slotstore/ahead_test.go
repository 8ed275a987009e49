package slotstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestSlotClaimAhead: a live claim sent before its slot's time (Ahead) wins
// as a live claim does, and its record says the run started at the slot's
// time, which is when it will; a live claim not marked Ahead records when
// Redis saw it. Under a run of the job in progress an Ahead claim answers
// busy and records nothing (the replica sends it again at the slot's time),
// where a live claim records the slot skipped. Ahead claims are still held
// to MaxEarly.
func TestSlotClaimAhead(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	at := time.Now().Add(3 * time.Second).Truncate(time.Second)

	ahead := live("ahead", at, "r1")
	ahead.Ahead, ahead.MaxEarly = true, 10*time.Second
	won := claimOne(t, s, ahead)
	if won.Outcome != slot.OutcomeWon {
		t.Fatalf("ahead claim: %+v, want won", won)
	}
	rec, _, err := s.Record(ctx, "ahead", at)
	if err != nil || !rec.Started.Equal(at) || rec.State != slot.StateRunning {
		t.Fatalf("ahead claim's record %+v (%v): want running, started at the slot's time %v", rec, err, at)
	}
	finish(s, won.Lease, slot.StateDone, "")

	plain := live("plain", at, "r1")
	plain.MaxEarly = 10 * time.Second
	pw := claimOne(t, s, plain)
	if pw.Outcome != slot.OutcomeWon {
		t.Fatalf("live claim: %+v, want won", pw)
	}
	if rec, _, _ := s.Record(ctx, "plain", at); !rec.Started.Before(at) {
		t.Fatalf("a live claim sent early recorded started %v, want Redis's time of the claim (before %v)", rec.Started, at)
	}
	finish(s, pw.Lease, slot.StateDone, "")

	// A run of the job holds its lease: busy, nothing recorded.
	prev := claimOne(t, s, live("long", at.Add(-time.Minute), "r9"))
	if prev.Outcome != slot.OutcomeWon {
		t.Fatal(prev)
	}
	busy := live("long", at, "r1")
	busy.Ahead, busy.MaxEarly = true, 10*time.Second
	if r := claimOne(t, s, busy); r.Outcome != slot.OutcomeBusy || r.Holder != "r9" || r.Wait <= 0 {
		t.Fatalf("ahead claim under a running job: %+v, want busy, held by r9", r)
	}
	if _, ok, _ := s.Record(ctx, "long", at); ok {
		t.Fatal("a busy ahead claim left a record")
	}
	// Once that run has finished, the claim at the slot's time wins.
	finish(s, prev.Lease, slot.StateDone, "")
	if r := claimOne(t, s, busy); r.Outcome != slot.OutcomeWon {
		t.Fatalf("ahead claim after the run ended: %+v, want won", r)
	} else {
		finish(s, r.Lease, slot.StateDone, "")
	}

	// Further ahead than MaxEarly: refused, nothing recorded.
	far := live("far", at.Add(time.Minute), "r1")
	far.Ahead, far.MaxEarly = true, 2*time.Second
	if r := claimOne(t, s, far); r.Outcome != slot.OutcomeEarly {
		t.Fatalf("ahead claim a minute early with max_skew 2s: %+v, want early", r)
	}
	if _, ok, _ := s.Record(ctx, "far", at.Add(time.Minute)); ok {
		t.Fatal("a refused early claim left a record")
	}
}

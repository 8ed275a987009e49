package slotstore_test

import (
	"context"
	"errors"
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

// TestCatchupClaimIsBounded: a catch-up claim with a MaxEarly (a backfill)
// is refused, and records nothing, when its slot is further ahead of
// Redis's clock than that, or older than its retention less that (the
// slot's record may have expired: a slot that ran would run again). Within
// both it wins; a slot that has a record answers lost either way; without
// a MaxEarly neither bound applies.
func TestCatchupClaimIsBounded(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	catchup := func(job string, at time.Time, early time.Duration) slot.Claim {
		c := live(job, at, "cli")
		c.Kind, c.Deadline, c.Retention, c.MaxEarly = slot.ClaimCatchup, time.Time{}, time.Minute, early
		return c
	}
	claim := func(c slot.Claim) slot.Result {
		t.Helper()
		res, err := s.Claim(ctx, []slot.Claim{c})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	nothing := func(job string, at time.Time) {
		t.Helper()
		if rec, ok, _ := s.Record(ctx, job, at); ok {
			t.Fatalf("%s: a refused claim left a record: %+v", job, rec)
		}
	}

	if r := claim(catchup("future", now.Add(10*time.Second), 2*time.Second)); r.Outcome != slot.OutcomeEarly || r.Err != nil || r.Wait < 7*time.Second {
		t.Errorf("a slot 10s ahead, MaxEarly 2s: %+v; want early, by about 10s", r)
	}
	nothing("future", now.Add(10*time.Second))
	// 58.5s to 59.5s old: past the retention (1m) less MaxEarly (2s).
	old := claim(catchup("old", now.Add(-59*time.Second), 2*time.Second))
	if !errors.Is(old.Err, slot.ErrPastRetention) || old.Outcome != "" {
		t.Errorf("a slot 59s old, retention 1m, MaxEarly 2s: %+v; want Err wrapping ErrPastRetention", old)
	} else {
		t.Logf("refused: %v", old.Err)
	}
	nothing("old", now.Add(-59*time.Second))

	for _, c := range []slot.Claim{
		catchup("within", now.Add(-55*time.Second), 2*time.Second),
		catchup("soon", now.Add(time.Second), 2*time.Second),
		catchup("unbounded", now.Add(-59*time.Second), 0),
	} {
		if r := claim(c); r.Outcome != slot.OutcomeWon {
			t.Errorf("%s: %+v; want won", c.Job, r)
		} else {
			finish(s, r.Lease, slot.StateDone, "")
		}
	}
	// A slot that has a record is lost to it, whatever its age.
	done := live("recorded", now.Add(-59*time.Second), "r1")
	done.Retention, done.Deadline = time.Hour, time.Now().Add(time.Hour)
	if r := claim(done); r.Outcome != slot.OutcomeWon {
		t.Fatal(r)
	}
	if r := claim(catchup("recorded", now.Add(-59*time.Second), 2*time.Second)); r.Outcome != slot.OutcomeLost || r.Holder != "r1" {
		t.Errorf("a recorded slot 59s old: %+v; want lost to r1", r)
	}
}

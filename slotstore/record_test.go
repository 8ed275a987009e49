package slotstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestRecordsReadBackAsWritten: a record is written by the claim and
// takeover scripts (in Lua) and rewritten by a finish from what the run's
// lease kept (in Go). Whatever the texts hold (spaces, colons, newlines, a
// replica ID with spaces), the finished record has the claim's fields and the
// finish's state, error and result; and a job's own script reads the state
// and the fence from the first two words.
func TestRecordsReadBackAsWritten(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	const replica = "pod 7 eu:1"

	// A manual slot: the record keeps who asked and why.
	m := live("rec", time.Now(), replica)
	m.Kind, m.Manual = slot.ClaimManual, &slot.Manual{ID: "req-1", By: "ops@host", Note: "line one\nline two: a b 3:x"}
	won := claimOne(t, s, m)
	if won.Outcome != slot.OutcomeWon {
		t.Fatalf("manual claim: %+v", won)
	}
	before, ok, err := s.ManualRecord(ctx, "rec", "req-1")
	if err != nil || !ok || before.State != slot.StateRunning || before.Owner != replica || before.Manual == nil ||
		before.Manual.By != "ops@host" || before.Manual.Note != m.Manual.Note || before.Started.IsZero() || !before.Slot.Equal(before.Started) {
		t.Fatalf("the manual slot's record: %+v %v %v", before, ok, err)
	}
	errText, result := "boom\n  at: x.go:1 2", "winners: a b\n12:34"
	if err := s.Finish(ctx, []slot.FinishRequest{{Lease: won.Lease, State: slot.StateFailed, Error: errText, Result: result}})[0]; err != nil {
		t.Fatal(err)
	}
	after, _, _ := s.ManualRecord(ctx, "rec", "req-1")
	want := before
	want.State, want.Error, want.Result, want.Finished = slot.StateFailed, errText, result, after.Finished
	if !sameRecord(after, want) || after.Finished.Before(after.Started) {
		t.Fatalf("finished manual record\n got %+v\nwant %+v", after, want)
	}

	// A scheduled slot taken over: attempt 2's record (built in Lua), then
	// its finish (built in Go).
	at := time.Unix(1_700_006_000, 0)
	first := claimOne(t, s, live("rec", at, "dies"))
	lapse(t, rdb, s, "rec", "lease")
	second := claimOne(t, s, takeover("rec", at, replica, true, 3))
	if second.Outcome != slot.OutcomeWon || second.Attempt != 2 || second.Fence <= first.Fence {
		t.Fatalf("takeover: %+v", second)
	}
	before, _, _ = s.Record(ctx, "rec", at)
	if before.Attempt != 2 || before.Owner != replica || before.Fence != second.Fence || before.RunID != second.Lease.RunID() ||
		!strings.Contains(before.Error, "attempt 1 on dies lost its lease") {
		t.Fatalf("attempt 2's record: %+v", before)
	}
	if err := s.Finish(ctx, []slot.FinishRequest{{Lease: second.Lease, State: slot.StateDone, Result: "ok"}})[0]; err != nil {
		t.Fatal(err)
	}
	after, _, _ = s.Record(ctx, "rec", at)
	want = before
	want.State, want.Error, want.Result, want.Finished = slot.StateDone, "", "ok", after.Finished
	if !sameRecord(after, want) {
		t.Fatalf("finished attempt 2\n got %+v\nwant %+v", after, want)
	}

	// What a job's own script reads: the state and the fence.
	v, err := rdb.Eval(ctx, `local state, fence = string.match(redis.call('GET', KEYS[1]) or '', '^(%S+) (%S+) ')
return {state, fence}`, []string{slotstore.RecordKey(s.Prefix(), "rec", at)}).StringSlice()
	if err != nil || len(v) != 2 || v[0] != "done" || v[1] != itoa(second.Fence) {
		t.Fatalf("a job's script reads %q, %v; want done and fence %d", v, err, second.Fence)
	}
}

func sameRecord(a, b slot.Record) bool {
	if (a.Manual == nil) != (b.Manual == nil) || (a.Manual != nil && *a.Manual != *b.Manual) {
		return false
	}
	a.Manual, b.Manual = nil, nil
	return a.Job == b.Job && a.Slot.Equal(b.Slot) && a.State == b.State && a.Owner == b.Owner && a.Attempt == b.Attempt &&
		a.Fence == b.Fence && a.Started.Equal(b.Started) && a.Finished.Equal(b.Finished) && a.Error == b.Error &&
		a.RunID == b.RunID && a.Result == b.Result
}

// TestRecordsListsTheLast32Ended: the job's state keeps the 32 slots that
// ended last in a ring; after 40 runs and a slot recorded missed, Records
// lists the running one and the 32 newest ended, newest first.
func TestRecordsListsTheLast32Ended(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	base := time.Unix(1_700_008_000, 0)
	for i := range 40 {
		r := claimOne(t, s, live("ring", base.Add(time.Duration(i)*time.Second), "r1"))
		if err := finish(s, r.Lease, slot.StateDone, ""); err != nil {
			t.Fatal(err)
		}
	}
	miss := live("ring", base.Add(40*time.Second), "r1")
	miss.Kind, miss.Deadline = slot.ClaimMiss, time.Time{} // no deadline: recorded at once
	claimOne(t, s, miss)
	claimOne(t, s, live("ring", base.Add(41*time.Second), "r1")) // running
	recs, err := s.Records(ctx, "ring", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 33 {
		t.Fatalf("Records lists %d slots, want 33 (the running one and 32 ended)", len(recs))
	}
	for i, r := range recs {
		if want := base.Add(time.Duration(41-i) * time.Second); !r.Slot.Equal(want) {
			t.Fatalf("record %d is of slot %v, want %v", i, r.Slot.Unix(), want.Unix())
		}
	}
	if recs[0].State != slot.StateRunning || recs[1].State != slot.StateMissed || recs[2].State != slot.StateDone {
		t.Fatalf("newest records: %s, %s, %s", recs[0].State, recs[1].State, recs[2].State)
	}
}

// TestRunningListWithOverlap: with overlap allowed, three slots of a job run
// at once and the oldest ends first; the job's state lists exactly the two
// still running, and checks on the ended one leave the list as it is.
func TestRunningListWithOverlap(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	base := time.Unix(1_700_009_000, 0)
	var leases []slot.Lease
	for i := range 3 {
		c := live("par", base.Add(time.Duration(i)*time.Second), "r1")
		c.AllowOverlap = true
		leases = append(leases, claimOne(t, s, c).Lease)
	}
	if err := finish(s, leases[0], slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r := claimOne(t, s, takeover("par", base, "r2", false, 1)); r.Outcome != slot.OutcomeClosed {
			t.Fatalf("check on the ended slot: %+v", r)
		}
	}
	st, err := s.JobStates(ctx, []string{"par"})
	if err != nil {
		t.Fatal(err)
	}
	if r := st["par"].Running; len(r) != 2 || !r[0].Equal(base.Add(time.Second)) || !r[1].Equal(base.Add(2*time.Second)) {
		t.Fatalf("running after the oldest ended: %v (state: %q)", r, rdb.HGet(ctx, stateKey(s, "par"), "running").Val())
	}
}

// TestRetriedTakeoverRestoresItsLease: a takeover sent again with its token
// (its reply was lost, and its lease lapsed meanwhile) is won again with its
// lease's TTL back, as a retried claim is; otherwise its replica would run
// attempt 2 on a lease Redis no longer holds, while a third replica takes
// the slot over as attempt 3. If another run holds the job meanwhile, it
// answers busy.
func TestRetriedTakeoverRestoresItsLease(t *testing.T) {
	_, rdb, s := newSlots(t)
	at := time.Unix(1_700_009_100, 0)
	claimOne(t, s, live("tk", at, "dies"))
	lapse(t, rdb, s, "tk", "lease")
	tk := takeover("tk", at, "r2", true, 3)
	tk.Token = "tok-2"
	first := claimOne(t, s, tk)
	if first.Outcome != slot.OutcomeWon || first.Attempt != 2 {
		t.Fatalf("takeover: %+v", first)
	}
	lapse(t, rdb, s, "tk", "lease") // the reply was lost; time passes
	again := claimOne(t, s, tk)
	if again.Outcome != slot.OutcomeWon || again.Attempt != 2 || again.Fence != first.Fence {
		t.Fatalf("the same takeover again: %+v, want won, attempt 2, fence %d", again, first.Fence)
	}
	if ttl := leaseTTL(t, rdb, s, "tk", "lease"); ttl < 4*time.Second {
		t.Fatalf("the retried takeover left its lease %v, want its TTL (5s) back", ttl)
	}
	if r := claimOne(t, s, takeover("tk", at, "r3", true, 3)); r.Outcome != slot.OutcomeAlive {
		t.Fatalf("a third replica's check: %+v, want alive (attempt 2 holds its lease)", r)
	}
	// Another run takes the job while attempt 2's lease has lapsed: the
	// retried takeover waits for it.
	lapse(t, rdb, s, "tk", "lease")
	if r := claimOne(t, s, live("tk", at.Add(time.Second), "r4")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the next slot: %+v", r)
	}
	if r := claimOne(t, s, tk); r.Outcome != slot.OutcomeBusy || r.Holder != "r4" {
		t.Fatalf("the takeover again while r4's run holds the job: %+v, want busy", r)
	}
}

package slotstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// fill is a backfill's claim: a catch-up claim, bounded by MaxEarly, that
// may win a slot recorded missed (OverMissed).
func fill(job string, at time.Time, replica string) slot.Claim {
	c := live(job, at, replica)
	c.Kind, c.Deadline, c.MaxEarly, c.OverMissed = slot.ClaimCatchup, time.Time{}, 2*time.Second, true
	return c
}

// miss is a worker's claim that records the slot missed (the catch-up of an
// outage older than its window).
func miss(job string, at time.Time, replica string) slot.Claim {
	return slot.Claim{Kind: slot.ClaimMiss, Job: job, Slot: at, Replica: replica, Retention: time.Hour,
		Reason: "older than the catch-up window"}
}

// rawRecord is a slot's record as Redis has it.
func rawRecord(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, at time.Time) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), slotstore.RecordKey(s.Prefix(), job, at)).Result()
	if err != nil {
		t.Fatalf("the record of %s@%d: %v", job, at.Unix(), err)
	}
	return v
}

// TestBackfillClaimWinsAMissedSlotOnce: a slot recorded missed never
// started. Every claim but a backfill's (OverMissed) still loses to its
// record, changing nothing: live, ahead, contested, catch-up, miss, expire,
// and a takeover finds it closed. Of eight backfill claims sent at once,
// exactly one wins it, as a fresh win: attempt 1, a fence above the job's
// last, a run ID, the slot listed running; the others lose to that run. The
// winner's claim sent again (its reply lost) is won again, with its fence.
// Its finish records the run's outcome; after that, a backfill claim loses.
func TestBackfillClaimWinsAMissedSlotOnce(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	at := now.Add(-30 * time.Second)

	before := claimOne(t, s, live("m", now.Add(-40*time.Second), "w1"))
	if before.Outcome != slot.OutcomeWon {
		t.Fatalf("an earlier slot: %+v", before)
	}
	if err := finish(s, before.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, miss("m", at, "w0")); r.Outcome != slot.OutcomeMissed {
		t.Fatalf("recording the slot missed: %+v", r)
	}
	missed := rawRecord(t, rdb, s, "m", at)

	others := map[string]slot.Claim{"live": live("m", at, "r1")}
	c := live("m", at, "r1")
	c.Ahead = true
	others["ahead"] = c
	c = live("m", at, "r1")
	c.Contested = true
	others["contested"] = c
	c = fill("m", at, "r1")
	c.OverMissed = false
	others["catchup"] = c
	others["miss"] = miss("m", at, "r1")
	c = miss("m", at, "r1")
	c.Kind, c.Deadline = slot.ClaimExpire, time.Now().Add(-time.Second)
	others["expire"] = c
	for name, c := range others {
		if r := claimOne(t, s, c); r.Outcome != slot.OutcomeLost || r.State != slot.StateMissed || r.Holder != "w0" {
			t.Errorf("a %s claim of the missed slot: %+v; want lost to w0's missed record", name, r)
		}
	}
	if r := claimOne(t, s, takeover("m", at, "r1", true, 3)); r.Outcome != slot.OutcomeClosed || r.State != slot.StateMissed {
		t.Errorf("a takeover of the missed slot: %+v; want closed (missed)", r)
	}
	if v := rawRecord(t, rdb, s, "m", at); v != missed {
		t.Fatalf("the other claims changed the missed record:\n%q\nto\n%q", missed, v)
	}

	const backfills = 8
	claims := make([]slot.Claim, backfills)
	results := make([]slot.Result, backfills)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range backfills {
		claims[i] = fill("m", at, fmt.Sprintf("bf%d", i))
		claims[i].Token, claims[i].RunID = fmt.Sprintf("token-%d", i), fmt.Sprintf("run-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := s.Claim(ctx, []slot.Claim{claims[i]})
			if err != nil {
				res = []slot.Result{{Err: err}}
			}
			results[i] = res[0]
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, r := range results {
		switch {
		case r.Err != nil:
			t.Fatalf("backfill %d: %v", i, r.Err)
		case r.Outcome == slot.OutcomeWon && winner >= 0:
			t.Fatalf("two backfills won the missed slot: bf%d and bf%d", winner, i)
		case r.Outcome == slot.OutcomeWon:
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no backfill won the missed slot: %+v", results)
	}
	won := results[winner]
	name := claims[winner].Replica
	for i, r := range results {
		if i != winner && (r.Outcome != slot.OutcomeLost || r.State != slot.StateRunning || r.Holder != name || r.Fence != won.Fence) {
			t.Errorf("backfill %d: %+v; want lost to %s's run (fence %d)", i, r, name, won.Fence)
		}
	}
	if won.Attempt != 1 || won.Fence <= before.Fence || won.Lease == nil || !won.Lease.Slot().Equal(at) || won.Lease.RunID() != claims[winner].RunID {
		t.Fatalf("the won backfill: %+v (the job's last fence %d); want attempt 1, a higher fence, its run ID", won, before.Fence)
	}
	rec, ok, err := s.Record(ctx, "m", at)
	if err != nil || !ok || rec.State != slot.StateRunning || rec.Owner != name || rec.Fence != won.Fence || rec.Attempt != 1 ||
		rec.RunID != claims[winner].RunID || rec.Started.IsZero() || rec.Error != "" {
		t.Fatalf("the record once won: %+v (%v, %v); want running by %s, fence %d, started", rec, ok, err, name, won.Fence)
	}
	wasMissed := slot.Missed{By: "w0", Reason: "older than the catch-up window"}
	if rec.Missed == nil || *rec.Missed != wasMissed {
		t.Fatalf("the record once won keeps of the missed one %+v; want %+v", rec.Missed, wasMissed)
	}
	if st, err := s.Running(ctx, []string{"m"}); err != nil || len(st["m"].Running) != 1 || !st["m"].Running[0].Equal(at) {
		t.Fatalf("the job's running slots: %+v, %v; want the backfilled one", st, err)
	}
	if holder, hs, ttl, err := s.Holder(ctx, "m"); err != nil || holder != name || !hs.Equal(at) || ttl <= 0 {
		t.Fatalf("the job's lease: %q %v %v %v; want %s's, for the slot", holder, hs, ttl, err, name)
	}
	again := claimOne(t, s, claims[winner])
	if again.Outcome != slot.OutcomeWon || again.Fence != won.Fence || again.Attempt != 1 {
		t.Fatalf("the winning claim sent again: %+v; want won again, fence %d", again, won.Fence)
	}
	if r := claimOne(t, s, live("m", at, "r1")); r.Outcome != slot.OutcomeLost || r.State != slot.StateRunning || r.Holder != name {
		t.Errorf("a live claim of the backfilled slot: %+v; want lost to %s", r, name)
	}

	// Finished through the lease of the claim sent again: what it kept of
	// the missed record came back with its reply.
	if err := finish(s, again.Lease, slot.StateFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = s.Record(ctx, "m", at)
	if rec.State != slot.StateFailed || rec.Owner != name || rec.Error != "boom" || rec.Fence != won.Fence || rec.Started.IsZero() || rec.Finished.IsZero() {
		t.Fatalf("the record once finished: %+v; want failed by %s", rec, name)
	}
	if rec.Missed == nil || *rec.Missed != wasMissed {
		t.Fatalf("the record once finished keeps of the missed one %+v; want %+v", rec.Missed, wasMissed)
	}
	if r := claimOne(t, s, fill("m", at, "bf9")); r.Outcome != slot.OutcomeLost || r.State != slot.StateFailed || r.Holder != name {
		t.Errorf("a backfill claim of the slot it ran: %+v; want lost", r)
	}
}

// TestBackfillClaimLeavesOtherRecords: a backfill claim loses to every
// record but a missed one (running, done, failed, abandoned, skipped,
// paused), changing nothing.
func TestBackfillClaimLeavesOtherRecords(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	at := func(i int) time.Time { return now.Add(time.Duration(i-40) * time.Second) }
	want := map[slot.State]time.Time{}

	for i, st := range []slot.State{slot.StateDone, slot.StateFailed} {
		r := claimOne(t, s, live("o", at(i), "w1"))
		if err := finish(s, r.Lease, st, ""); err != nil {
			t.Fatal(err)
		}
		want[st] = at(i)
	}
	holder := claimOne(t, s, live("o", at(3), "w1"))
	if r := claimOne(t, s, live("o", at(4), "w2")); r.Outcome != slot.OutcomeSkipped {
		t.Fatalf("a slot while a run holds the job: %+v", r)
	}
	want[slot.StateSkipped] = at(4)
	if err := finish(s, holder.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Pause(ctx, "o", "maintenance", "ops@host"); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, live("o", at(5), "w1")); r.Outcome != slot.OutcomePaused {
		t.Fatalf("a slot of the paused job: %+v", r)
	}
	if _, err := s.Resume(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	want[slot.StatePaused] = at(5)
	claimOne(t, s, live("o", at(6), "dies"))
	lapse(t, rdb, s, "o", "lease") // its owner is gone: its lease runs out
	if r := claimOne(t, s, takeover("o", at(6), "w1", false, 1)); r.Outcome != slot.OutcomeAbandoned {
		t.Fatalf("a takeover of a slot whose owner is gone: %+v", r)
	}
	want[slot.StateAbandoned] = at(6)

	leftAlone := func(st slot.State, a time.Time) {
		t.Helper()
		v := rawRecord(t, rdb, s, "o", a)
		if r := claimOne(t, s, fill("o", a, "bf")); r.Outcome != slot.OutcomeLost || r.State != st {
			t.Errorf("a backfill claim of a slot recorded %s: %+v; want lost", st, r)
		}
		if after := rawRecord(t, rdb, s, "o", a); after != v {
			t.Errorf("a backfill claim changed a record %s:\n%q\nto\n%q", st, v, after)
		}
	}
	for st, a := range want { // the job free
		leftAlone(st, a)
	}
	running := claimOne(t, s, live("o", at(7), "w1"))
	for st, a := range want { // a run holding the job
		leftAlone(st, a)
	}
	leftAlone(slot.StateRunning, at(7))
	if err := finish(s, running.Lease, slot.StateDone, ""); err != nil {
		t.Errorf("the running slot's own finish after the backfill claim: %v", err)
	}
}

// TestBackfillClaimOfAMissedSlotIsBounded: like a claim of a slot with no
// record, a backfill claim of a missed slot waits (busy, recording nothing)
// while a run holds the job under overlap skip, and is refused, recording
// nothing, once the slot is older than the retention less MaxEarly (a record
// of a run there may have expired before the miss was written).
func TestBackfillClaimOfAMissedSlotIsBounded(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	at := now.Add(-30 * time.Second)

	claimOne(t, s, miss("b", at, "w0"))
	missed := rawRecord(t, rdb, s, "b", at)
	holder := claimOne(t, s, live("b", now.Add(-10*time.Second), "w1"))
	if r := claimOne(t, s, fill("b", at, "bf")); r.Outcome != slot.OutcomeBusy || r.Holder != "w1" {
		t.Errorf("a backfill claim of the missed slot while a run holds the job: %+v; want busy", r)
	}
	if v := rawRecord(t, rdb, s, "b", at); v != missed {
		t.Fatalf("a busy backfill claim changed the missed record:\n%q\nto\n%q", missed, v)
	}
	if err := finish(s, holder.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, fill("b", at, "bf")); r.Outcome != slot.OutcomeWon {
		t.Errorf("a backfill claim of the missed slot once the job is free: %+v; want won", r)
	}

	// 58.5s to 59.5s old: past the retention (1m) less MaxEarly (2s).
	old := now.Add(-59 * time.Second)
	claimOne(t, s, miss("b", old, "w0"))
	missed = rawRecord(t, rdb, s, "b", old)
	c := fill("b", old, "bf")
	c.Retention = time.Minute
	res, err := s.Claim(ctx, []slot.Claim{c})
	if err != nil || !errors.Is(res[0].Err, slot.ErrPastRetention) || res[0].Outcome != "" {
		t.Errorf("a backfill claim of a missed slot 59s old, retention 1m, MaxEarly 2s: %+v, %v; want Err wrapping ErrPastRetention", res, err)
	}
	if v := rawRecord(t, rdb, s, "b", old); v != missed {
		t.Fatalf("a refused backfill claim changed the missed record:\n%q\nto\n%q", missed, v)
	}
}

// TestBackfillAfterARetentionRaise: a record is kept for the retention it
// was written with. After the job's retention was raised from 1m to 1h, a
// backfill claim (retention 1h) of a slot that ran under the old one, 90s
// ago, whose record has expired since (deleted here, as its expiry would),
// is refused, recording nothing: its record may have been kept only 1m.
// The same claim of a job whose records were all written with 1h wins: the
// missing record there proves that the slot never ran. A slot 30s old is
// within even the old retention less MaxEarly: a backfill claim finds its
// record and loses. So is one whose record a takeover wrote under a
// retention of 1m, the run's claim under 1h.
func TestBackfillAfterARetentionRaise(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	ran := func(job string, at time.Time, retention time.Duration) {
		t.Helper()
		c := live(job, at, "w0")
		c.Kind, c.Deadline, c.Retention = slot.ClaimCatchup, time.Time{}, retention
		r := claimOne(t, s, c)
		if r.Outcome != slot.OutcomeWon {
			t.Fatalf("%s: the run's claim: %+v", job, r)
		}
		if err := finish(s, r.Lease, slot.StateDone, ""); err != nil {
			t.Fatal(err)
		}
	}
	expire := func(job string, at time.Time) {
		t.Helper()
		if err := rdb.Del(ctx, slotstore.RecordKey(s.Prefix(), job, at)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	old, recent := now.Add(-90*time.Second), now.Add(-30*time.Second)

	ran("raised", old, time.Minute)
	ran("raised", recent, time.Minute)
	expire("raised", old)
	ran("raised", now.Add(-10*time.Second), time.Hour) // the first run with the new retention
	res, err := s.Claim(ctx, []slot.Claim{fill("raised", old, "bf")})
	if err != nil || !errors.Is(res[0].Err, slot.ErrPastRetention) || res[0].Outcome != "" || !strings.Contains(res[0].Err.Error(), "retention of 1m0s") {
		t.Errorf("a backfill claim (retention 1h) of a slot 90s old that ran under a retention of 1m: %+v, %v; want Err wrapping ErrPastRetention, naming 1m0s", res, err)
	} else {
		t.Logf("refused: %v", res[0].Err)
	}
	if ok, _ := rdb.Exists(ctx, slotstore.RecordKey(s.Prefix(), "raised", old)).Result(); ok != 0 {
		t.Errorf("the refused backfill claim left a record")
	}
	if r := claimOne(t, s, fill("raised", recent, "bf")); r.Outcome != slot.OutcomeLost || r.State != slot.StateDone {
		t.Errorf("a backfill claim of a slot 30s old that ran: %+v; want lost to its done record", r)
	}
	marks, err := rdb.HGet(ctx, stateKey(s, "raised"), "rets").Result()
	if err != nil || !regexp.MustCompile(`^60000:\d{13} 3600000:\d{13}$`).MatchString(marks) {
		t.Errorf("the job's retention marks: %q, %v; want 1m's and 1h's", marks, err)
	}

	// A takeover by a replica whose retention is 1m records the slot of a
	// run claimed under 1h abandoned, kept 1m.
	claimOne(t, s, live("taken", old, "dies"))
	lapse(t, rdb, s, "taken", "lease")
	tk := takeover("taken", old, "w2", false, 1)
	tk.Retention = time.Minute
	if r := claimOne(t, s, tk); r.Outcome != slot.OutcomeAbandoned {
		t.Fatalf("the takeover: %+v; want abandoned", r)
	}
	expire("taken", old)
	if res, err := s.Claim(ctx, []slot.Claim{fill("taken", old, "bf")}); err != nil || !errors.Is(res[0].Err, slot.ErrPastRetention) {
		t.Errorf("a backfill claim (retention 1h) of a slot 90s old, recorded abandoned by a takeover under a retention of 1m: %+v, %v; want Err wrapping ErrPastRetention", res, err)
	}

	ran("kept", old, time.Hour)
	expire("kept", old)
	if r := claimOne(t, s, fill("kept", old, "bf")); r.Outcome != slot.OutcomeWon {
		t.Errorf("a backfill claim of a slot 90s old with no record, every record of its job kept 1h: %+v; want won", r)
	}
}

// TestBackfillClaimOverAProtocol1Missed: a missed record that protocol 1
// wrote (a hash; protocol 1 too recorded missed only a slot with no record)
// is won by a backfill claim as a protocol-2 one is, and lost by any other.
func TestBackfillClaimOverAProtocol1Missed(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Now().Truncate(time.Second).Add(-30 * time.Second)
	old := v1{t: t, rdb: rdb, prefix: s.Prefix(), job: "v"}
	old.record(at.Unix(), map[string]any{"slot": at.Unix(), "owner": "old", "state": "missed", "finished": at.UnixMilli(), "error": "misfire"}, time.Hour)

	c := fill("v", at, "r1")
	c.OverMissed = false
	if r := claimOne(t, s, c); r.Outcome != slot.OutcomeLost || r.State != slot.StateMissed || r.Holder != "old" {
		t.Errorf("a catch-up claim of protocol 1's missed slot: %+v; want lost", r)
	}
	won := claimOne(t, s, fill("v", at, "bf"))
	if won.Outcome != slot.OutcomeWon {
		t.Fatalf("a backfill claim of protocol 1's missed slot: %+v; want won", won)
	}
	if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if rec, ok, err := s.Record(ctx, "v", at); err != nil || !ok || rec.State != slot.StateDone || rec.Owner != "bf" || rec.Fence != won.Fence {
		t.Fatalf("the record: %+v (%v, %v); want done by bf", rec, ok, err)
	} else if want := (slot.Missed{By: "old", Reason: "misfire"}); rec.Missed == nil || *rec.Missed != want {
		t.Fatalf("the record keeps of the missed one %+v; want %+v", rec.Missed, want)
	}
}

// TestBackfillClaimsAreChecked: OverMissed is a backfill's: a catch-up claim
// with a MaxEarly (the bound within which a missed record proves that the
// slot never ran), of a scheduled slot. Any other claim with it is refused,
// and nothing is sent.
func TestBackfillClaimsAreChecked(t *testing.T) {
	_, _, s := newSlots(t)
	at := time.Now().Add(-time.Minute)
	bad := map[string]slot.Claim{}
	for _, k := range []slot.Kind{slot.ClaimLive, slot.ClaimMiss, slot.ClaimExpire, slot.ClaimTakeover} {
		c := fill("c", at, "bf")
		c.Kind = k
		bad[k.String()] = c
	}
	c := fill("c", at, "bf")
	c.MaxEarly = 0
	bad["no MaxEarly"] = c
	c = manual("c", "k", "bf")
	c.OverMissed, c.MaxEarly = true, 2*time.Second
	bad["manual"] = c
	for name, c := range bad {
		if _, err := s.Claim(context.Background(), []slot.Claim{c}); err == nil {
			t.Errorf("%s with OverMissed: Claim took it", name)
		}
	}
}

// TestBackfillClaimSentAgainKeepsTheMissedRecord: a backfill's claim of a
// missed slot wins, its reply is lost, and the job is paused before it is
// sent again: the claim is answered won again from its own record (the
// pause does not stop a run that started), and that answer must carry what
// the missed record said, or the finish, which writes the record from the
// lease, drops it.
func TestBackfillClaimSentAgainKeepsTheMissedRecord(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	at := time.Now().Truncate(time.Second).Add(-30 * time.Second)
	if r := claimOne(t, s, miss("p", at, "w0")); r.Outcome != slot.OutcomeMissed {
		t.Fatalf("recording the slot missed: %+v", r)
	}
	c := fill("p", at, "bf")
	c.Token, c.RunID = "token-1", "run-1"
	if r := claimOne(t, s, c); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the backfill's claim: %+v; want won", r)
	}
	if _, _, err := s.Pause(ctx, "p", "maintenance", "ops@host"); err != nil {
		t.Fatal(err)
	}
	again := claimOne(t, s, c)
	if again.Outcome != slot.OutcomeWon {
		t.Fatalf("the claim sent again while the job is paused: %+v; want won again", again)
	}
	if err := finish(s, again.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	want := slot.Missed{By: "w0", Reason: "older than the catch-up window"}
	if rec, ok, err := s.Record(ctx, "p", at); err != nil || !ok || rec.State != slot.StateDone || rec.Missed == nil || *rec.Missed != want {
		t.Fatalf("the record once finished: %+v (%v, %v); want done, keeping %+v", rec, ok, err, want)
	}
}

// TestBackfillOverAMissedRecordReadsItOnce: on a Redis of its own, a
// backfill's claim that wins over a missed record reads the record once
// (its GET gives both the state that lets it win and what the missed
// record said), reads the job's state once, and writes the record and the
// state once each.
func TestBackfillOverAMissedRecordReadsItOnce(t *testing.T) {
	rdb, s := newOwnedSlots(t)
	ctx := context.Background()
	at := time.Now().Truncate(time.Second).Add(-30 * time.Second)
	if r := claimOne(t, s, miss("m", at, "w0")); r.Outcome != slot.OutcomeMissed {
		t.Fatalf("recording the slot missed: %+v", r)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, fill("m", at, "bf")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the backfill's claim: %+v; want won over w0's missed record", r)
	}
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := scriptCommands(stats), "get=1 hmget=1 hset=1 set=1"; got != want {
		t.Errorf("the script ran %q, want %q", got, want)
	}
}

package slotstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// v1 lays out what a replica of protocol 1 left for job under prefix: its
// keys as that version wrote them.
type v1 struct {
	t      *testing.T
	rdb    *redis.Client
	prefix string
	job    string
}

func (o v1) key(suffix string) string { return o.prefix + ":{" + o.job + "}:" + suffix }

func (o v1) do(err error) {
	o.t.Helper()
	if err != nil {
		o.t.Fatal(err)
	}
}

// record writes a protocol-1 record: a hash, with a TTL.
func (o v1) record(at int64, fields map[string]any, ttl time.Duration) {
	ctx := context.Background()
	k := o.key("slot:" + itoa(at))
	o.do(o.rdb.HSet(ctx, k, fields).Err())
	o.do(o.rdb.PExpire(ctx, k, ttl).Err())
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestJobStatesReadsInProtocol1: an upgrade from protocol 1. What its
// replicas left (a running slot whose replica died, its lease gone; a
// finished slot; the fence counter, the high-water mark, a pause and the run
// history) is taken in by JobStates: the running record becomes a protocol-2
// record, for a takeover to settle; the fence and high-water mark carry
// over, the pause stands, the history lists the slots that ended. The finished protocol-1 record stays as it was,
// and still closes its slot: a claim of it loses, naming its owner. Taking
// in again changes nothing.
func TestJobStatesReadsInProtocol1(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	old := v1{t, rdb, s.Prefix(), "legacy"}
	running, done := int64(1_700_005_010), int64(1_700_005_009)
	now := time.Now()
	old.record(done, map[string]any{"slot": done, "owner": "old-1", "token": "t9", "attempt": 1, "fence": "1700005009000001",
		"state": "done", "lease": "job", "started": done * 1000, "finished": done*1000 + 5, "error": "", "run_id": "r9"}, time.Hour)
	old.record(running, map[string]any{"slot": running, "owner": "old 2", "token": "t10", "attempt": 1, "fence": "1700005010000001",
		"state": "running", "lease": "job", "started": running * 1000, "run_id": "r10"}, 50*time.Minute)
	// Its replica died mid-run: its lease (old.key("lease")) is gone.
	// Protocol 1's fence counter ran ahead of the clock (a failover to a host
	// whose clock is behind): protocol 2's fences must still be above it.
	ahead := now.Add(time.Hour).UnixMicro()
	old.do(rdb.Set(ctx, old.key("fence"), ahead, 0).Err())
	old.do(rdb.ZAdd(ctx, old.key("last"), redis.Z{Score: float64(running), Member: "last"}).Err())
	old.do(rdb.ZAdd(ctx, old.key("running"), redis.Z{Score: float64(running), Member: itoa(running)}).Err())
	old.do(rdb.HSet(ctx, old.key("paused"), "note", "migration", "by", "ops@host", "at", now.UnixMilli()).Err())
	for _, at := range []int64{done - 1, done} {
		old.do(rdb.XAdd(ctx, &redis.XAddArgs{Stream: old.key("runs"), Values: []any{"slot", at, "event", "done", "replica", "old-1"}}).Err())
	}

	// Before any replica of protocol 2 has started, a pause set by protocol 1 shows.
	if p, err := s.Pauses(ctx, []string{"legacy"}); err != nil || p["legacy"].By != "ops@host" {
		t.Fatalf("Pauses before the upgrade = %+v, %v; want protocol 1's", p, err)
	}
	states, err := s.JobStates(ctx, []string{"legacy"})
	if err != nil {
		t.Fatal(err)
	}
	st := states["legacy"]
	if !st.Last.Equal(time.Unix(running, 0)) || len(st.Running) != 1 || !st.Running[0].Equal(time.Unix(running, 0)) {
		t.Fatalf("JobStates = %+v, want the last and running slot %d", st, running)
	}
	rec, ok, err := s.Record(ctx, "legacy", time.Unix(running, 0))
	if err != nil || !ok || rec.State != slot.StateRunning || rec.Owner != "old 2" || rec.Fence != 1700005010000001 ||
		rec.Attempt != 1 || rec.RunID != "r10" || !rec.Started.Equal(time.UnixMilli(running*1000)) {
		t.Fatalf("the running slot's record after the upgrade: %+v %v %v", rec, ok, err)
	}
	if typ := rdb.Type(ctx, slotstore.RecordKey(s.Prefix(), "legacy", time.Unix(running, 0))).Val(); typ != "string" {
		t.Fatalf("the running slot's record is a %s, want a protocol-2 string", typ)
	}
	if ttl := rdb.PTTL(ctx, slotstore.RecordKey(s.Prefix(), "legacy", time.Unix(running, 0))).Val(); ttl < 49*time.Minute || ttl > 50*time.Minute {
		t.Fatalf("the converted record's TTL is %v, want what it had left (50m)", ttl)
	}
	if st.OlderRuns != 0 {
		t.Fatalf("JobStates counts %d runs of protocol 1 going on, want none (its lease is gone)", st.OlderRuns)
	}
	if holder, _, _, err := s.Holder(ctx, "legacy"); err != nil || holder != "" {
		t.Fatalf("Holder after the upgrade = %q %v, want none: the run's lease is gone", holder, err)
	}
	if p, err := s.Pauses(ctx, []string{"legacy"}); err != nil || p["legacy"].By != "ops@host" || p["legacy"].Note != "migration" {
		t.Fatalf("Pauses after the upgrade = %+v, %v; want the pause to stand", p, err)
	}
	recs, err := s.Records(ctx, "legacy", 10)
	if err != nil || len(recs) != 2 || !recs[0].Slot.Equal(time.Unix(running, 0)) || recs[1].State != slot.StateDone || recs[1].Owner != "old-1" {
		t.Fatalf("Records after the upgrade = %+v, %v; want the running slot and the finished protocol-1 one", recs, err)
	}
	if n := rdb.ZCard(ctx, old.key("running")).Val(); n != 0 {
		t.Fatalf("protocol 1's running set still holds %d slots", n)
	}
	// The finished protocol-1 record still closes its slot.
	if r := claimOne(t, s, live("legacy", time.Unix(done, 0), "new")); r.Outcome != slot.OutcomeLost || r.Holder != "old-1" || r.State != slot.StateDone {
		t.Fatalf("claim of a slot protocol 1 finished: %+v, want lost to old-1, done", r)
	}
	if recs, err := s.Peek(ctx, []slot.Claim{live("legacy", time.Unix(done, 0), "new")}); err != nil || recs[0].State != "" {
		t.Fatalf("Peek of a protocol-1 record = %+v, %v; want none read (the claim decides)", recs, err)
	}
	// The pause stands for protocol 2's claims; resumed, the next slot's
	// fence is above protocol 1's.
	if r := claimOne(t, s, live("legacy", time.Unix(running+1, 0), "new")); r.Outcome != slot.OutcomePaused {
		t.Fatalf("claim under the carried-over pause: %+v", r)
	}
	if _, err := s.Resume(ctx, "legacy"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, old.key("paused")).Val(); n != 0 {
		t.Fatal("Resume left protocol 1's pause, which its replicas would still honour")
	}
	// The converted run is settled like any other: its lease is gone.
	if r := claimOne(t, s, takeover("legacy", time.Unix(running, 0), "new", false, 1)); r.Outcome != slot.OutcomeAbandoned || r.Holder != "old 2" || r.Fence != ahead+1 {
		t.Fatalf("takeover of the converted run: %+v, want abandoned, owner old 2, fence %d (one above protocol 1's)", r, ahead+1)
	}
	if r := claimOne(t, s, live("legacy", time.Unix(running+2, 0), "new")); r.Outcome != slot.OutcomeWon || r.Fence != ahead+2 {
		t.Fatalf("the next slot: %+v, want won with fence %d", r, ahead+2)
	}
	// Taking in again changes nothing.
	before, _ := rdb.HGetAll(ctx, stateKey(s, "legacy")).Result()
	if _, err := s.JobStates(ctx, []string{"legacy"}); err != nil {
		t.Fatal(err)
	}
	after, _ := rdb.HGetAll(ctx, stateKey(s, "legacy")).Result()
	if len(before) != len(after) {
		t.Fatalf("taking in twice changed the job's state: %v, then %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("taking in twice changed %s: %q, then %q", k, v, after[k])
		}
	}
}

// TestPauseReachesProtocol1: a pause set through protocol 2 is written where
// replicas of protocol 1 read it, so that it holds while a deployment
// upgrades; Resume removes it there too.
func TestPauseReachesProtocol1(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	if _, _, err := s.Pause(ctx, "p1", "deploy", "ops@host"); err != nil {
		t.Fatal(err)
	}
	h := rdb.HGetAll(ctx, s.Prefix()+":{p1}:paused").Val()
	if h["by"] != "ops@host" || h["note"] != "deploy" || h["at"] == "" {
		t.Fatalf("protocol 1's pause = %v", h)
	}
	if _, err := s.Resume(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, s.Prefix()+":{p1}:paused").Val() != 0 {
		t.Fatal("Resume left protocol 1's pause")
	}
}

// TestJobStatesLeavesAProtocol1RunThatGoesOn: a replica of protocol 1 leaves
// the registry when it stops, then finishes its runs (renewing and recording
// them as protocol 1 does). While such a run's lease holds, JobStates leaves
// its record alone, lists the slot running, counts it in OlderRuns, and
// copies its lease into the job's state: a claim of the job's next slot is
// skipped (overlap), a check on the slot finds it alive, and the old
// replica's renewals and finish work. Once it has finished, the check closes
// it and frees the copied lease, and the next slot runs.
func TestJobStatesLeavesAProtocol1RunThatGoesOn(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	old := v1{t, rdb, s.Prefix(), "draining"}
	at := int64(1_700_005_100)
	old.record(at, map[string]any{"slot": at, "owner": "old-1", "token": "t1", "attempt": 1, "fence": "1700005100000001",
		"state": "running", "lease": "job", "started": at * 1000, "run_id": "r1"}, time.Hour)
	old.do(rdb.Set(ctx, old.key("lease"), "t1 "+itoa(at)+" old-1", 15*time.Second).Err())
	old.do(rdb.ZAdd(ctx, old.key("running"), redis.Z{Score: float64(at), Member: itoa(at)}).Err())

	states, err := s.JobStates(ctx, []string{"draining"})
	if err != nil {
		t.Fatal(err)
	}
	if st := states["draining"]; st.OlderRuns != 1 || len(st.Running) != 1 || !st.Running[0].Equal(time.Unix(at, 0)) {
		t.Fatalf("JobStates = %+v, want the slot running and one run of protocol 1 going on", st)
	}
	key := slotstore.RecordKey(s.Prefix(), "draining", time.Unix(at, 0))
	if typ := rdb.Type(ctx, key).Val(); typ != "hash" {
		t.Fatalf("the record of a run that goes on is a %s: its replica can no longer renew or finish it", typ)
	}
	if holder, _, ttl, err := s.Holder(ctx, "draining"); err != nil || holder != "old-1" || ttl <= 10*time.Second || ttl > 15*time.Second {
		t.Fatalf("Holder = %q %v %v, want old-1's lease copied, with its TTL", holder, ttl, err)
	}
	if r := claimOne(t, s, live("draining", time.Unix(at+1, 0), "new")); r.Outcome != slot.OutcomeSkipped || r.Holder != "old-1" {
		t.Fatalf("a claim of the next slot while the run goes on: %+v, want skipped (overlap)", r)
	}
	if r := claimOne(t, s, takeover("draining", time.Unix(at, 0), "new", true, 3)); r.Outcome != slot.OutcomeAlive || r.Wait <= 0 {
		t.Fatalf("a check on the slot while the run goes on: %+v, want alive", r)
	}
	if n := rdb.ZCard(ctx, old.key("running")).Val(); n != 1 {
		t.Fatalf("protocol 1's running set holds %d slots, want the run that goes on", n)
	}
	// The old replica renews (its renew.lua reads the hash), then finishes:
	// its finish.lua sets the state, drops its lease and the running entry.
	if n := rdb.HLen(ctx, key).Val(); n == 0 {
		t.Fatal("the record is gone")
	}
	old.do(rdb.PExpire(ctx, old.key("lease"), 15*time.Second).Err())
	old.do(rdb.HSet(ctx, key, "state", "done", "finished", time.Now().UnixMilli()).Err())
	old.do(rdb.Del(ctx, old.key("lease")).Err())
	old.do(rdb.ZRem(ctx, old.key("running"), itoa(at)).Err())
	if r := claimOne(t, s, takeover("draining", time.Unix(at, 0), "new", true, 3)); r.Outcome != slot.OutcomeClosed || r.State != slot.StateDone {
		t.Fatalf("a check on the slot once its run finished: %+v, want closed, done", r)
	}
	states, err = s.JobStates(ctx, []string{"draining"})
	if err != nil {
		t.Fatal(err)
	}
	if st := states["draining"]; st.OlderRuns != 0 || len(st.Running) != 0 {
		t.Fatalf("JobStates after the run finished = %+v, want nothing running", st)
	}
	if r := claimOne(t, s, live("draining", time.Unix(at+2, 0), "new")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the slot after: %+v, want won (the copied lease is freed)", r)
	}
	if rec, _, _ := s.Record(ctx, "draining", time.Unix(at, 0)); rec.State != slot.StateDone || rec.Owner != "old-1" {
		t.Fatalf("the run's record: %+v, want done by old-1, as its replica recorded it", rec)
	}
}

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
// replicas left (a running slot with its lease, a finished slot, the fence
// counter, the high-water mark, a pause and the run history) is taken in by
// JobStates: the running record becomes a protocol-2 record with its lease,
// the fence and high-water mark carry over, the pause stands, the history
// lists the slots that ended. The finished protocol-1 record stays as it was,
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
	old.do(rdb.Set(ctx, old.key("lease"), "t10 "+itoa(running)+" old 2", 30*time.Second).Err())
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
	if holder, at, ttl, err := s.Holder(ctx, "legacy"); err != nil || holder != "old 2" || !at.Equal(time.Unix(running, 0)) || ttl <= 25*time.Second || ttl > 30*time.Second {
		t.Fatalf("Holder after the upgrade = %q %v %v %v, want old 2's lease with its TTL", holder, at, ttl, err)
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
	// The converted run is settled like any other once its lease lapses.
	lapse(t, rdb, s, "legacy", "lease")
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
	if _, err := s.Pause(ctx, "p1", "deploy", "ops@host"); err != nil {
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

package slotstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestHeartbeatJobLists: a replica's registry entry is small; its job list
// goes to Redis once (and again when Redis lost it or its table changed),
// and is read only by a replica whose table differs. A replica that leaves
// takes its list along.
func TestHeartbeatJobLists(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	replica := func(id string, jobs map[string]string) slot.Replica {
		return slot.Replica{ID: id, Instance: id + "-1", Started: time.Now(), Jobs: jobs, Table: slot.TableHash(jobs)}
	}
	tableA := map[string]string{"j": "schedule=@every 1s", "k": "schedule=@daily"}
	tableB := map[string]string{"j": "schedule=@every 2s"}
	a, a2, b := replica("a", tableA), replica("a2", tableA), replica("b", tableB)
	beat := func(me slot.Replica) map[string]slot.Replica {
		t.Helper()
		reg, err := s.Heartbeat(ctx, me, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]slot.Replica{}
		for _, r := range reg.Replicas {
			out[r.ID] = r
		}
		return out
	}
	lists := s.Prefix() + ":replicas" // the lists' key is {<registry>}:jobs
	lists = "{" + lists + "}:jobs"
	beat(a)
	beat(a2)
	seen := beat(b)
	if len(seen) != 3 || seen["a"].Jobs["k"] != "schedule=@daily" || seen["a"].Table != a.Table || seen["b"].Jobs != nil {
		t.Fatalf("b's view: %+v; want a's list (another table), and no list of its own", seen)
	}
	if seen := beat(a); seen["a2"].Jobs != nil || seen["b"].Jobs["j"] != "schedule=@every 2s" {
		t.Fatalf("a's view: %+v; want no list for a2 (same table), b's list", seen)
	}
	entry := rdb.HGet(ctx, s.Prefix()+":replicas", "a").Val()
	if strings.Contains(entry, "schedule=") || len(entry) > 200 {
		t.Fatalf("a's registry entry lists its jobs (%d bytes): %s", len(entry), entry)
	}
	// A list is sent once: removed behind the store's back, it is not
	// sent again by the next heartbeat, which learns it is gone...
	before := rdb.HGet(ctx, lists, "a").Val()
	if !strings.HasPrefix(before, a.Table+" ") {
		t.Fatalf("a's list: %q", before)
	}
	rdb.HDel(ctx, lists, "a")
	if seen := beat(b); seen["a"].Jobs != nil {
		t.Fatalf("b's view with a's list gone: %+v; want only a's table", seen["a"])
	}
	beat(a)
	if rdb.HExists(ctx, lists, "a").Val() {
		t.Fatal("a's list was sent again by the heartbeat that found it gone; want it sent by the next")
	}
	// ... and the one after sends it.
	beat(a)
	if seen := beat(b); seen["a"].Jobs["j"] != "schedule=@every 1s" {
		t.Fatalf("b's view once a sent its list again: %+v", seen["a"])
	}
	// A changed table sends its list at once.
	a.Jobs = map[string]string{"j": "schedule=@every 3s"}
	a.Table = slot.TableHash(a.Jobs)
	beat(a)
	if seen := beat(b); seen["a"].Jobs["j"] != "schedule=@every 3s" || len(seen["a"].Jobs) != 1 {
		t.Fatalf("b's view after a's table changed: %+v", seen["a"])
	}
	if err := s.Leave(ctx, a); err != nil {
		t.Fatal(err)
	}
	if rdb.HExists(ctx, lists, "a").Val() {
		t.Fatal("a left, its list stayed")
	}
}

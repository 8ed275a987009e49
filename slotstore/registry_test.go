package slotstore_test

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
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
	lists := s.Prefix() + ":replicas:jobs"
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
	if !rdb.HExists(ctx, lists, "a").Val() {
		t.Fatal("a's list was not sent again")
	}
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

// TestLeaveSentAgainTakesItsList: a Leave whose reply was lost removed the
// entry; go-redis sends the script again, which finds no entry. The job
// list goes all the same (no heartbeat prunes the list of an entry that is
// gone), and a successor under the same ID that has an entry keeps its own.
func TestLeaveSentAgainTakesItsList(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	jobs := map[string]string{"j": "schedule=@every 1s"}
	a := slot.Replica{ID: "a", Instance: "a-1", Started: time.Now(), Jobs: jobs, Table: slot.TableHash(jobs)}
	if _, err := s.Heartbeat(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	registry, lists := s.Prefix()+":replicas", s.Prefix()+":replicas:jobs"
	rdb.HDel(ctx, registry, "a") // the first Leave ran; its reply was lost
	if err := s.Leave(ctx, a); err != nil {
		t.Fatal(err)
	}
	if rdb.HExists(ctx, lists, "a").Val() {
		t.Fatal("a left (its reply lost, the call sent again), its list stayed")
	}
	// A successor under a's ID has heartbeated: the old instance's Leave
	// leaves its entry and its list alone.
	a2 := a
	a2.Instance = "a-2"
	if _, err := s.Heartbeat(ctx, a2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Leave(ctx, a); err != nil {
		t.Fatal(err)
	}
	if !rdb.HExists(ctx, registry, "a").Val() || !rdb.HExists(ctx, lists, "a").Val() {
		t.Fatal("the old instance's Leave removed its successor's entry or list")
	}
}

// TestHeartbeatUnderAPrefixACL: a replica whose Redis user may touch only
// its prefix's keys heartbeats (the registry of every deployment, outside
// the prefix, is left out), publishes and reads job lists, and leaves.
func TestHeartbeatUnderAPrefixACL(t *testing.T) {
	srv := redistest.StartOwned(t)
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "scoped", "on", ">secret", "resetkeys", "~acl:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = "scoped", "secret"
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	s, err := slotstore.New(rdb, "acl")
	if err != nil {
		t.Fatal(err)
	}
	jobsA, jobsB := map[string]string{"j": "schedule=@every 1s"}, map[string]string{"j": "schedule=@every 2s"}
	a := slot.Replica{ID: "a", Instance: "a-1", Started: time.Now(), Jobs: jobsA, Table: slot.TableHash(jobsA)}
	b := slot.Replica{ID: "b", Instance: "b-1", Started: time.Now(), Jobs: jobsB, Table: slot.TableHash(jobsB)}
	if _, err := s.Heartbeat(ctx, a, time.Minute); err != nil {
		t.Fatalf("heartbeat under a prefix-only ACL: %v", err)
	}
	reg, err := s.Heartbeat(ctx, b, time.Minute)
	if err != nil {
		t.Fatalf("heartbeat under a prefix-only ACL: %v", err)
	}
	if len(reg.Replicas) != 2 || reg.Replicas[0].Jobs["j"] != "schedule=@every 1s" || reg.Deployments != nil {
		t.Fatalf("b's view: %+v; want a's list, and no deployments (not readable)", reg)
	}
	if err := s.Leave(ctx, a); err != nil {
		t.Fatalf("leave under a prefix-only ACL: %v", err)
	}
}

// TestHeartbeatPrunesLists: an entry not seen for ten stale windows is
// removed from the registry, and its job list with it.
func TestHeartbeatPrunesLists(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	jobs := map[string]string{"j": "schedule=@every 1s"}
	gone := slot.Replica{ID: "gone", Instance: "g-1", Started: time.Now(), Jobs: jobs, Table: slot.TableHash(jobs)}
	here := slot.Replica{ID: "here", Instance: "h-1", Started: time.Now(), Jobs: jobs, Table: slot.TableHash(jobs)}
	const stale = 20 * time.Millisecond
	if _, err := s.Heartbeat(ctx, gone, stale); err != nil {
		t.Fatal(err)
	}
	lists := s.Prefix() + ":replicas:jobs"
	if !rdb.HExists(ctx, lists, "gone").Val() {
		t.Fatal("no list for gone")
	}
	time.Sleep(11 * stale)
	if _, err := s.Heartbeat(ctx, here, stale); err != nil {
		t.Fatal(err)
	}
	if rdb.HExists(ctx, s.Prefix()+":replicas", "gone").Val() || rdb.HExists(ctx, lists, "gone").Val() {
		t.Fatal("gone's entry or list outlived ten stale windows")
	}
	if !rdb.HExists(ctx, lists, "here").Val() {
		t.Fatal("here's list is missing")
	}
}

// TestHeartbeatMaxSkew: a replica's max_skew goes out in its registry entry
// and comes back, through Heartbeat and Registry; an entry without it (a
// replica older than the field) reads as 0, unknown. An older reader, whose
// description has no such field, still reads a newer entry.
func TestHeartbeatMaxSkew(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	strict := slot.Replica{ID: "strict", Instance: "s-1", Started: time.Now(), Offset: 700 * time.Millisecond, MaxSkew: 500 * time.Millisecond, Table: "t"}
	if _, err := s.Heartbeat(ctx, strict, time.Minute); err != nil {
		t.Fatal(err)
	}
	entry := rdb.HGet(ctx, s.Prefix()+":replicas", "strict").Val()
	if !strings.Contains(entry, `"max_skew_ns":500000000`) {
		t.Fatalf("strict's entry: %s; want max_skew_ns 500000000", entry)
	}
	desc := strings.SplitN(entry, " ", 3)[2] // "<instance> <seen_ms> <json>"
	// An older version's description: slotstore.replicaJSON before max_skew_ns.
	var older struct {
		Version  string            `json:"version,omitempty"`
		Protocol int               `json:"protocol,omitempty"`
		Started  int64             `json:"started_ms"`
		OffsetNS int64             `json:"offset_ns"`
		Jobs     map[string]string `json:"jobs,omitempty"`
		Table    string            `json:"table,omitempty"`
	}
	if err := json.Unmarshal([]byte(desc), &older); err != nil || older.OffsetNS != int64(strict.Offset) || older.Table != "t" {
		t.Fatalf("an older reader of %s: %+v, %v", desc, older, err)
	}
	now := rdb.Time(ctx).Val()
	rdb.HSet(ctx, s.Prefix()+":replicas", "old", "o-1 "+strconv.FormatInt(now.UnixMilli(), 10)+` {"version":"v0.9.0","protocol":2,"started_ms":1,"offset_ns":0,"table":"t"}`)
	reg, err := s.Heartbeat(ctx, slot.Replica{ID: "mine", Instance: "m-1", Started: time.Now(), MaxSkew: 2 * time.Second, Table: "t"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	read, err := s.Registry(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"mine": 2 * time.Second, "old": 0, "strict": 500 * time.Millisecond}
	for name, reg := range map[string]slot.Registry{"Heartbeat": reg, "Registry": read} {
		got := map[string]time.Duration{}
		for _, r := range reg.Replicas {
			got[r.ID] = r.MaxSkew
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: max_skew per replica %v, want %v", name, got, want)
		}
	}
}

// TestHeartbeatCatchup: the catch-up ranges a replica publishes come back
// through Heartbeat and Registry, to the millisecond; a replica catching
// nothing up publishes none (no field), and an entry without the field (an
// older version's) reads as none.
func TestHeartbeatCatchup(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	from, to := time.UnixMilli(1795549571000), time.UnixMilli(1795549671000)
	busy := slot.Replica{ID: "busy", Instance: "b-1", Started: time.Now(), Table: "t",
		Catchup: map[string]slot.CatchupRange{"report": {From: from, To: to}}}
	if _, err := s.Heartbeat(ctx, busy, time.Minute); err != nil {
		t.Fatal(err)
	}
	idle := slot.Replica{ID: "idle", Instance: "i-1", Started: time.Now(), Table: "t"}
	reg, err := s.Heartbeat(ctx, idle, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if entry := rdb.HGet(ctx, s.Prefix()+":replicas", "idle").Val(); strings.Contains(entry, "catchup") {
		t.Errorf("idle's entry: %s; want no catch-up field", entry)
	}
	read, err := s.Registry(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, reg := range map[string]slot.Registry{"Heartbeat": reg, "Registry": read} {
		got := map[string]map[string]slot.CatchupRange{}
		for _, r := range reg.Replicas {
			got[r.ID] = r.Catchup
		}
		if r := got["busy"]["report"]; len(got["busy"]) != 1 || !r.From.Equal(from) || !r.To.Equal(to) || got["idle"] != nil {
			t.Errorf("%s: catch-up per replica %v; want busy's report %v..%v, none for idle", name, got, from, to)
		}
	}
}

// TestHeartbeatGone: a stale entry that publishes a catch-up (its replica
// stopped heartbeating mid catch-up, without leaving) comes back as Gone,
// through Heartbeat and Registry, until it is removed GoneKept on (where
// one with no catch-up goes ten stale windows on); so does a stale
// predecessor's entry under the heartbeating replica's own ID, read before
// the new one replaces it, however long ago it was seen within GoneKept (a
// replica killed alone that starts again after ten stale windows settles
// its own catch-up). A live entry, a stale one with no catch-up, and one
// that left are not gone; one that does not parse is skipped.
func TestHeartbeatGone(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	const stale = time.Minute
	from, to := time.UnixMilli(1795549571000), time.UnixMilli(1795549671000)
	key := s.Prefix() + ":replicas"
	now := rdb.Time(ctx).Val()
	entry := func(inst string, ago time.Duration, catchup bool) string {
		desc := `{"protocol":2,"started_ms":1,"offset_ns":0,"table":"t"}`
		if catchup {
			desc = `{"protocol":2,"started_ms":1,"offset_ns":0,"table":"t","catchup_ms":{"report":[1795549571000,1795549671000]}}`
		}
		return inst + " " + strconv.FormatInt(now.Add(-ago).UnixMilli(), 10) + " " + desc
	}
	rdb.HSet(ctx, key,
		"killed", entry("k-1", 2*stale, true),
		"quiet", entry("q-1", 2*stale, false),
		"idle", entry("i-1", 11*stale, false),
		"ancient", entry("a-1", slotstore.GoneKept+stale, true),
		"me", entry("old", 11*stale, true))
	live := slot.Replica{ID: "live", Instance: "l-1", Started: time.Now(), Table: "t",
		Catchup: map[string]slot.CatchupRange{"report": {From: from, To: to}}}
	leaving := slot.Replica{ID: "leaving", Instance: "v-1", Started: time.Now(), Table: "t", Catchup: live.Catchup}
	for _, r := range []slot.Replica{live, leaving} {
		if _, err := s.Heartbeat(ctx, r, stale); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Leave(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	read, err := s.Registry(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	// One that does not parse (another version's) is skipped: it must not
	// stop the heartbeat.
	rdb.HSet(ctx, key, "garbled", "g-1 "+strconv.FormatInt(now.Add(-2*stale).UnixMilli(), 10)+` {"catchup_ms":{"report":"soon"}}`)
	beat, err := s.Heartbeat(ctx, slot.Replica{ID: "me", Instance: "new", Started: time.Now(), Table: "t"}, stale)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(rs []slot.Replica) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID+"/"+r.Instance)
		}
		return strings.Join(out, " ")
	}
	for name, tc := range map[string]struct {
		reg        slot.Registry
		gone, live string
	}{
		"Registry":  {read, "killed/k-1 me/old", "live/l-1"},
		"Heartbeat": {beat, "killed/k-1 me/old", "live/l-1 me/new"},
	} {
		if got := ids(tc.reg.Gone); got != tc.gone {
			t.Errorf("%s: gone %q, want %q", name, got, tc.gone)
		}
		if got := ids(tc.reg.Replicas); got != tc.live {
			t.Errorf("%s: live %q, want %q", name, got, tc.live)
		}
		for _, g := range tc.reg.Gone {
			if r := g.Catchup["report"]; len(g.Catchup) != 1 || !r.From.Equal(from) || !r.To.Equal(to) {
				t.Errorf("%s: %s's catch-up %v, want report %v..%v", name, g.ID, g.Catchup, from, to)
			}
		}
	}
	if rdb.HExists(ctx, key, "ancient").Val() || rdb.HExists(ctx, key, "idle").Val() {
		t.Error("an entry with a catch-up older than GoneKept, or one with none ten stale windows old, is still there")
	}
	// The predecessor's entry that me/new replaced stays readable as gone,
	// by every replica, at every heartbeat: the reply that carried it may
	// have been lost.
	after, err := s.Registry(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Heartbeat(ctx, live, stale)
	if err != nil {
		t.Fatal(err)
	}
	for name, reg := range map[string]slot.Registry{"Registry after the successor": after, "a peer's Heartbeat after it": again} {
		if got := ids(reg.Gone); got != "killed/k-1 me/old" {
			t.Errorf("%s: gone %q, want %q", name, got, "killed/k-1 me/old")
		}
	}
}

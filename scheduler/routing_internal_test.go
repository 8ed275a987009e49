package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// preferred is the replica of ids that ranks first for the slot of job at
// at: the one spread routing has claim it; "" when ids is empty.
func preferred(ids []string, job string, at time.Time) string {
	for _, id := range ids {
		if rank(ids, id, job, at) == 0 {
			return id
		}
	}
	return ""
}

// TestPreferredIsEvenAndStable: rendezvous hashing gives each of 5 replicas
// a fifth of 100,000 slots (within 1%), and when one leaves, only its slots
// move (to the others, evenly); the rest keep their replica.
func TestPreferredIsEvenAndStable(t *testing.T) {
	ids := []string{"replica-1", "replica-2", "replica-3", "replica-4", "replica-5"}
	const n = 100_000
	start := time.Unix(1_795_000_000, 0)
	count := map[string]int{}
	before := make([]string, n)
	for i := range n {
		before[i] = preferred(ids, "lottery", start.Add(time.Duration(i)*time.Second))
		count[before[i]]++
	}
	for _, id := range ids {
		if share := float64(count[id]) / n; math.Abs(share-0.2) > 0.01 {
			t.Errorf("%s prefers %.3f of the slots, want 0.2 ± 0.01", id, share)
		}
	}
	left := ids[:4] // replica-5 leaves
	moved := map[string]int{}
	for i := range n {
		now := preferred(left, "lottery", start.Add(time.Duration(i)*time.Second))
		switch {
		case before[i] != "replica-5" && now != before[i]:
			t.Fatalf("slot %d moved from %s to %s, though %s stayed", i, before[i], now, before[i])
		case before[i] == "replica-5":
			moved[now]++
		}
	}
	for _, id := range left {
		if share := float64(moved[id]) / float64(count["replica-5"]); math.Abs(share-0.25) > 0.02 {
			t.Errorf("%s took %.3f of the leaver's slots, want 0.25 ± 0.02", id, share)
		}
	}
	// Another job spreads on its own: the same slot is not always the same replica's.
	same := 0
	for i := range 1000 {
		at := start.Add(time.Duration(i) * time.Second)
		if preferred(ids, "lottery", at) == preferred(ids, "invoices", at) {
			same++
		}
	}
	if same > 300 {
		t.Errorf("two jobs share their preferred replica on %d of 1000 slots, want about 200", same)
	}
	if got := preferred(nil, "j", start); got != "" {
		t.Errorf("no replica: %q", got)
	}
}

// TestLargeTablesPublishTheirHash: a replica with more than maxListedJobs
// jobs publishes its table's hash, not its jobs; peers with the same table
// are candidates for each of its jobs, one with another table for none, and
// the other table is a disagreement.
func TestLargeTablesPublishTheirHash(t *testing.T) {
	jobs := map[string]string{}
	for i := range maxListedJobs + 1 {
		jobs[fmt.Sprintf("job%04d", i)] = "schedule=\"@every 1s\""
	}
	table := slot.TableHash(jobs)
	me := slot.Replica{ID: "a", Table: table}
	other := map[string]string{"job0000": "schedule=\"@every 2s\""}
	reg := slot.Registry{Replicas: []slot.Replica{
		{ID: "a", Table: table}, {ID: "b", Table: table}, {ID: "c", Table: slot.TableHash(other)},
		{ID: "d", Table: table, Offset: time.Hour}, // refuses to claim
	}}
	cands, same := candidates(me, reg, 2*time.Second)
	if len(cands) != 0 || !slices.Equal(same, []string{"a", "b"}) {
		t.Fatalf("candidates %v, same table %v; want none listed and a, b", cands, same)
	}
	dis := disagreements(me, "p", reg)
	if len(dis) != 1 || dis[0].Peer != "c" || dis[0].Job != "*" || !strings.Contains(dis[0].String(), "runs another table") {
		t.Fatalf("disagreements %v", dis)
	}
	if slot.TableHash(jobs) != table || slot.TableHash(other) == table {
		t.Fatal("TableHash is not a function of the table")
	}
}

// TestCandidatesJudgeEachPeerByItsMaxSkew: a peer is a candidate while its
// clock is within its own max_skew, as published (it refuses to claim
// above it), not within the reader's; a peer that publishes none (an older
// version) is judged by the reader's. So replicas with different max_skew
// compute the same candidates from one registry.
func TestCandidatesJudgeEachPeerByItsMaxSkew(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name            string
		offset, maxSkew time.Duration // the peer's; maxSkew 0: not published
		reader          time.Duration // the reader's max_skew
		want            bool
	}{
		{"stricter peer above its limit, below the reader's", 1000 * ms, 500 * ms, 2000 * ms, false},
		{"stricter peer lagging above its limit", -1000 * ms, 500 * ms, 2000 * ms, false},
		{"stricter peer within its limit", 400 * ms, 500 * ms, 2000 * ms, true},
		{"peer at its limit (refuses only above)", 500 * ms, 500 * ms, 2000 * ms, true},
		{"laxer peer above the reader's limit, within its own", 3000 * ms, 5000 * ms, 2000 * ms, true},
		{"laxer peer above its own limit", 6000 * ms, 5000 * ms, 2000 * ms, false},
		{"older peer within the reader's limit", 1000 * ms, 0, 2000 * ms, true},
		{"older peer above the reader's limit", 1000 * ms, 0, 500 * ms, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := map[string]string{"j": "schedule=\"@every 1s\""}
			me := slot.Replica{ID: "a", Jobs: jobs, Table: slot.TableHash(jobs), MaxSkew: tc.reader}
			peer := slot.Replica{ID: "b", Jobs: jobs, Table: me.Table, Offset: tc.offset, MaxSkew: tc.maxSkew}
			want := []string{"a"}
			if tc.want {
				want = []string{"a", "b"}
			}
			cands, _ := candidates(me, slot.Registry{Replicas: []slot.Replica{me, peer}}, tc.reader)
			if !slices.Equal(cands["j"], want) {
				t.Errorf("listed table: candidates for j %v, want %v", cands["j"], want)
			}
			// A large table (hash only) is judged the same way.
			me.Jobs, peer.Jobs = nil, nil
			if _, same := candidates(me, slot.Registry{Replicas: []slot.Replica{me, peer}}, tc.reader); !slices.Equal(same, want) {
				t.Errorf("large table: same-table candidates %v, want %v", same, want)
			}
		})
	}
	// Three replicas with three max_skews, each off Redis by 1s: only the
	// one whose limit allows it claims, and every reader agrees on that.
	jobs := map[string]string{"j": "schedule=\"@every 1s\""}
	reg := slot.Registry{}
	for _, r := range []struct {
		id      string
		maxSkew time.Duration
	}{{"strict", 500 * ms}, {"default", 2 * time.Second}, {"lax", 10 * time.Second}} {
		reg.Replicas = append(reg.Replicas, slot.Replica{ID: r.id, Jobs: jobs, Table: slot.TableHash(jobs), Offset: 3 * time.Second, MaxSkew: r.maxSkew})
	}
	for _, me := range reg.Replicas {
		if cands, _ := candidates(me, reg, me.MaxSkew); !slices.Equal(cands["j"], []string{"lax"}) {
			t.Errorf("%s (max_skew %v) counts %v as candidates, want lax alone", me.ID, me.MaxSkew, cands["j"])
		}
	}
}

// TestBackstopLooks: a backstop's looks are half a second after their
// slot's time, a whole second later for each time the hedge and four of
// the replica's slowest recent claim batches do not fit, and no later than
// half the job's misfire grace; the slots of an instant share a look, and
// looks stay in order of due time.
func TestBackstopLooks(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	every := &jobState{Job: Job{Name: "a", MisfireGrace: time.Minute}}
	other := &jobState{Job: Job{Name: "b", MisfireGrace: time.Minute}}
	short := &jobState{Job: Job{Name: "c", MisfireGrace: 400 * time.Millisecond}}
	r := &runner{}
	const hedge = 40 * time.Millisecond
	after := backstopDelay(hedge, r.batches.longest())
	r.backstop(every, at.Add(time.Second), after)
	r.backstop(other, at.Add(time.Second), after)
	r.backstop(short, at.Add(time.Second), after)
	r.backstop(every, at, after)
	r.batches.add(300 * time.Millisecond) // the hedge and four batches: 1.24 s
	r.backstop(every, at.Add(2*time.Second), backstopDelay(hedge, r.batches.longest()))
	type look struct {
		due, at time.Duration
		jobs    int
	}
	want := []look{
		{500 * time.Millisecond, 0, 1},
		{1200 * time.Millisecond, time.Second, 1},     // c: half its grace
		{1500 * time.Millisecond, time.Second, 2},     // a and b share a look
		{3500 * time.Millisecond, 2 * time.Second, 1}, // 1.5 s: 0.5 s did not fit 1.24 s
	}
	var got []look
	for _, sw := range r.sweeps {
		got = append(got, look{sw.due.Sub(at), sw.at.Sub(at), len(sw.jobs)})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("looks (due, slot, jobs after %v) = %v, want %v", at, got, want)
	}
}

// TestRunsAreKnownBySlot: a replica knows it runs a scheduled slot by the
// slot, not by its lease's time: a manual run triggered in the same second
// (whose lease's Slot is its trigger time, cut to the second) does not
// count as the scheduled slot's run.
func TestRunsAreKnownBySlot(t *testing.T) {
	var runs keySet
	at := time.Unix(1_800_000_000, 0)
	scheduled := targetOf(slot.Claim{Job: "j", Slot: at}).key("j")
	manual := targetOf(slot.Claim{Job: "j", Slot: at, Manual: &slot.Manual{ID: "m1"}}).key("j")
	runs.add(manual)
	if runs.has(scheduled) {
		t.Fatal("a manual run of the same second counts as the scheduled slot's")
	}
	runs.add(scheduled)
	if !runs.has(scheduled) || !runs.has(manual) {
		t.Fatal("the runs held are not known")
	}
	runs.remove(scheduled)
	runs.remove(scheduled) // a second remove changes nothing
	if runs.has(scheduled) || !runs.has(manual) {
		t.Fatal("after the scheduled run ended: want only the manual one held")
	}
}

// TestContenders: the replicas that claim a job's slots are those that list
// it and those that publish only the hash of this replica's (large) table.
func TestContenders(t *testing.T) {
	s := &Scheduler{}
	s.peers.candidates = map[string][]string{"a": {"r1", "r2"}}
	s.peers.sameTable = []string{"r3"}
	if n, m := s.contenders("a"), s.contenders("b"); n != 3 || m != 1 {
		t.Errorf("contenders: %d for a job two list, %d for one none lists; want 3 and 1 (r3 runs the same table)", n, m)
	}
}

// TestRoles: under spread routing, a slot's preferred replica claims it
// first, the next Hedgers replicas in its rendezvous order hedge, and the
// rest back it up. A replica claims at once under routing race, with fewer
// than two live candidates, and while it is not among the candidates
// itself (its own heartbeat not in yet): the others may count on it for
// slots that its view does not give it, and racing is always safe.
func TestRoles(t *testing.T) {
	ids := []string{"r1", "r2", "r3", "r4", "r5"}
	at := time.Unix(1_800_000_000, 0)
	job := &jobState{Job: Job{Name: "a", Routing: RoutingSpread}}
	s := &Scheduler{}
	s.peers.candidates = map[string][]string{"a": ids}
	count := map[role]int{}
	for _, id := range ids {
		r := &runner{s: s, self: id}
		got := r.role(job, at)
		count[got]++
		want := []role{roleFirst, roleHedge, roleHedge, roleBackstop, roleBackstop}[rank(ids, id, "a", at)] // Hedgers is 2
		if got != want {
			t.Errorf("%s, ranked %d of %d: role %d, want %d", id, rank(ids, id, "a", at), len(ids), got, want)
		}
	}
	if count[roleFirst] != 1 || count[roleHedge] != Hedgers || count[roleBackstop] != len(ids)-1-Hedgers {
		t.Errorf("roles of 5 replicas: %v; want 1 first, %d hedging, the rest backing up", count, Hedgers)
	}

	newcomer := &runner{s: s, self: "r6"} // not among the candidates yet
	if got := newcomer.role(job, at); got != roleFirst {
		t.Errorf("a replica not among the candidates: role %d, want %d (claim at once)", got, roleFirst)
	}
	race := &jobState{Job: Job{Name: "a", Routing: RoutingRace}}
	for _, id := range ids {
		if got := (&runner{s: s, self: id}).role(race, at); got != roleFirst {
			t.Errorf("routing race, %s: role %d, want %d", id, got, roleFirst)
		}
	}
	alone := &Scheduler{}
	alone.peers.candidates = map[string][]string{"a": {"r1"}}
	if got := (&runner{s: alone, self: "r1"}).role(job, at); got != roleFirst {
		t.Errorf("the only candidate: role %d, want %d", got, roleFirst)
	}
}

// TestHedgeBounds: the automatic hedge is four round trips to Redis, no
// shorter than minHedge (a preferred replica a moment late would otherwise
// lose its slots to its hedgers, who then claim them too) and no longer
// than maxHedge; a configured hedge is taken as it is.
func TestHedgeBounds(t *testing.T) {
	for _, c := range []struct{ rtt, configured, want time.Duration }{
		{100 * time.Microsecond, 0, minHedge},
		{10 * time.Millisecond, 0, 40 * time.Millisecond},
		{time.Second, 0, maxHedge},
		{100 * time.Microsecond, time.Second, time.Second},
	} {
		s := &Scheduler{rtt: c.rtt}
		s.cfg.hedge = c.configured
		if got := s.hedge(); got != c.want {
			t.Errorf("round trip %v, configured %v: hedge %v, want %v", c.rtt, c.configured, got, c.want)
		}
	}
}

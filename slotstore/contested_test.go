package slotstore_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// contestedCase sets up a slot of job in one state and returns the claim to
// send for it, and the fence its answer must carry (0: none).
type contestedCase struct {
	name  string
	setup func(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64)
}

var contestedCases = []contestedCase{
	{"no record", func(t *testing.T, _ *redis.Client, _ *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		return live(job, at, "r2"), 0
	}},
	{"running on another replica", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		return live(job, at, "r2"), won.Fence
	}},
	{"done", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
			t.Fatal(err)
		}
		return live(job, at, "r2"), won.Fence
	}},
	{"recorded missed", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		miss := live(job, at, "r1")
		miss.Kind, miss.Reason, miss.Deadline = slot.ClaimMiss, "catchup none", time.Time{}
		claimOne(t, s, miss)
		return live(job, at, "r2"), 0
	}},
	{"paused", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		if _, _, err := s.Pause(context.Background(), job, "", "ops"); err != nil {
			t.Fatal(err)
		}
		return live(job, at, "r2"), 0
	}},
	{"recorded paused", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		if _, _, err := s.Pause(context.Background(), job, "", "ops"); err != nil {
			t.Fatal(err)
		}
		claimOne(t, s, live(job, at, "r1"))
		return live(job, at, "r2"), 0
	}},
	{"its own, the reply lost", func(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		c := live(job, at, "r1")
		c.Token, c.RunID = "tok-"+job, "0190d3c2-0000-7000-8000-000000000001"
		won := claimOne(t, s, c)
		// Time passes while the reply is lost: the claim sent again restores
		// the lease (within the same millisecond, it would write what is there).
		lapse(t, rdb, s, job, "lease")
		return c, won.Fence
	}},
	{"its own, another run holds the job", func(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		c := live(job, at, "r1")
		c.Token = "tok-" + job
		won := claimOne(t, s, c)
		lapse(t, rdb, s, job, "lease")
		if next := claimOne(t, s, live(job, at.Add(time.Second), "r2")); next.Outcome != slot.OutcomeWon {
			t.Fatalf("the next slot: %+v", next)
		}
		return c, won.Fence
	}},
	{"no record, the job held by a run", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		claimOne(t, s, live(job, at.Add(-time.Second), "r1"))
		return live(job, at, "r2"), 0
	}},
	{"no record, too early", func(t *testing.T, _ *redis.Client, _ *slotstore.Store, job string, _ time.Time) (slot.Claim, int64) {
		c := live(job, time.Now().Add(time.Hour).Truncate(time.Second), "r2")
		c.MaxEarly = time.Second
		return c, 0
	}},
	{"running, and too early", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, _ time.Time) (slot.Claim, int64) {
		at := time.Now().Add(time.Hour).Truncate(time.Second)
		won := claimOne(t, s, live(job, at, "r1"))
		c := live(job, at, "r2")
		c.MaxEarly = time.Second
		return c, won.Fence
	}},
	{"past its deadline, running", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		c := live(job, at, "r2")
		c.Deadline = time.Now().Add(-time.Minute)
		return c, won.Fence
	}},
	{"ahead, running on another replica", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		c := live(job, at, "r2")
		c.Ahead = true
		return c, won.Fence
	}},
	{"ahead, no record, the job held by a run", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		claimOne(t, s, live(job, at.Add(-time.Second), "r1"))
		c := live(job, at, "r2")
		c.Ahead = true
		return c, 0
	}},
	{"ahead, no record, in the future", func(t *testing.T, _ *redis.Client, _ *slotstore.Store, job string, _ time.Time) (slot.Claim, int64) {
		c := live(job, time.Now().Add(time.Minute).Truncate(time.Second), "r2")
		c.Ahead, c.MaxEarly = true, 2*time.Minute
		return c, 0
	}},
	{"overlap allow, running on another replica", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		c := live(job, at, "r1")
		c.AllowOverlap = true
		won := claimOne(t, s, c)
		c.Replica = "r2"
		return c, won.Fence
	}},
	{"overlap allow, no record, another slot running", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		c := live(job, at.Add(-time.Second), "r1")
		c.AllowOverlap = true
		claimOne(t, s, c)
		c.Slot, c.Replica = at, "r2"
		return c, 0
	}},
	{"catch-up, running on another replica", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		c := live(job, at, "r2")
		c.Kind = slot.ClaimCatchup
		return c, won.Fence
	}},
	{"miss, running on another replica", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		c := live(job, at, "r2")
		c.Kind, c.Reason, c.Deadline = slot.ClaimMiss, "catchup none", time.Time{}
		return c, won.Fence
	}},
	{"expire past its deadline, done", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		won := claimOne(t, s, live(job, at, "r1"))
		if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
			t.Fatal(err)
		}
		c := live(job, at, "r2")
		c.Kind, c.Reason, c.Deadline = slot.ClaimExpire, "no replica claimed it", time.Now().Add(-time.Minute)
		return c, won.Fence
	}},
	{"expire past its deadline, no record", func(t *testing.T, _ *redis.Client, _ *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		c := live(job, at, "r2")
		c.Kind, c.Reason, c.Deadline = slot.ClaimExpire, "no replica claimed it", time.Now().Add(-time.Minute)
		return c, 0
	}},
	{"a protocol-1 record", func(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		key := s.Prefix() + ":{" + job + "}:slot:" + strconv.FormatInt(at.Unix(), 10)
		if err := rdb.HSet(context.Background(), key, "owner", "old-1", "state", "done", "fence", "1700005009000001", "attempt", 1, "token", "t9").Err(); err != nil {
			t.Fatal(err)
		}
		return live(job, at, "r2"), 1700005009000001
	}},
	{"a manual slot's", func(t *testing.T, _ *redis.Client, s *slotstore.Store, job string, at time.Time) (slot.Claim, int64) {
		m := live(job, at, "r1")
		m.Kind, m.Manual = slot.ClaimManual, &slot.Manual{ID: "once", By: "ops"}
		won := claimOne(t, s, m)
		m.Replica = "r2"
		return m, won.Fence
	}},
}

// TestContestedClaimsAnswerTheSame: a contested claim (Claim.Contested: the
// store reads the slot's record before anything else) gets the answer an
// uncontested one gets, and changes the same fields of the same keys,
// whatever state the slot and its job are in, in every mode: lost to
// another replica's record of each state, won again when the record is its
// own, and the claim's own answer when the slot has none. Each case is set
// up twice, on two jobs, one for each kind of claim.
func TestContestedClaimsAnswerTheSame(t *testing.T) {
	_, rdb, s := newSlots(t)
	at := time.Unix(1_700_006_000, 0)
	for i, tc := range contestedCases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]slot.Result
			var changed [2]string
			for k, contested := range []bool{false, true} {
				job := "c" + strconv.Itoa(i) + "-" + strconv.FormatBool(contested)
				c, fence := tc.setup(t, rdb, s, job, at)
				c.Contested = contested
				before := jobKeys(t, rdb, s, job)
				r := claimOne(t, s, c)
				changed[k] = changes(before, jobKeys(t, rdb, s, job))
				if fence != 0 && r.Fence != fence {
					t.Errorf("contested %v: fence %d, want the record's %d", contested, r.Fence, fence)
				}
				r.Lease, r.Fence = nil, 0 // the run's, and checked above
				if r.Wait > 0 {           // Redis's clock's
					r.Wait = time.Second
				}
				if r.Late > 0 {
					r.Late = time.Second
				}
				got[k] = r
			}
			if got[0] != got[1] {
				t.Errorf("uncontested: %+v\n  contested: %+v", got[0], got[1])
			}
			if changed[0] != changed[1] {
				t.Errorf("uncontested, it changed %q; contested, %q", changed[0], changed[1])
			}
		})
	}
}

// jobKeys returns every field of job's keys (its slots' records, its state,
// its ended ring): "<key after the job's tag> <field>" to its value ("" for
// a string's field).
func jobKeys(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string) map[string]string {
	t.Helper()
	ctx := context.Background()
	tag := s.Prefix() + ":{" + job + "}:"
	keys, err := rdb.Keys(ctx, tag+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		name := strings.TrimPrefix(k, tag)
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "string":
			out[name+" "] = rdb.Get(ctx, k).Val()
		case "hash":
			for f, v := range rdb.HGetAll(ctx, k).Val() {
				out[name+" "+f] = v
			}
		default:
			t.Fatalf("%s is a %s", k, typ)
		}
	}
	return out
}

// changes lists the fields that differ between two jobKeys snapshots,
// sorted: what a claim wrote, by name (values hold tokens and times).
func changes(before, after map[string]string) string {
	var out []string
	for k, v := range after {
		if w, ok := before[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+"(deleted)")
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// TestContestedClaimThatLosesOnlyReads: on a Redis of its own, a contested
// claim that finds another replica's record runs one GET, while the
// winner's run holds the job and after it has ended. An uncontested one
// reads the job's state first, and once the run has ended and freed the
// job, tries to write the record too.
func TestContestedClaimThatLosesOnlyReads(t *testing.T) {
	rdb, s := newOwnedSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_006_100, 0)
	won := claimOne(t, s, live("j", at, "r1"))
	for _, tc := range []struct {
		when      string
		contested bool
		want      string
	}{
		{"while the run holds the job", true, "get=1"},
		{"while the run holds the job", false, "get=1 hmget=1"},
		{"after the run", true, "get=1"},
		{"after the run", false, "get=1 hmget=1 set=1"},
	} {
		if tc.when == "after the run" && won.Lease != nil {
			if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
				t.Fatal(err)
			}
			won.Lease = nil
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		c := live("j", at, "r2")
		c.Contested = tc.contested
		if r := claimOne(t, s, c); r.Outcome != slot.OutcomeLost {
			t.Fatalf("%s, contested %v: %+v, want lost", tc.when, tc.contested, r)
		}
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := scriptCommands(stats); got != tc.want {
			t.Errorf("%s, contested %v: the script ran %q, want %q", tc.when, tc.contested, got, tc.want)
		}
	}
}

// scriptCommands lists the commands of INFO commandstats that a claim's
// script runs on keys (not EVALSHA, TIME or INFO), with their calls.
func scriptCommands(stats string) string {
	var out []string
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok || name == "evalsha" || name == "time" || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		out = append(out, name+"="+calls)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

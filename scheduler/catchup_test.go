package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestCatchup stops every replica for 5 slots, restarts them together, and
// checks what each catch-up policy made of the 5 missed slots. Each policy
// runs in its own bubble.
func TestCatchup(t *testing.T) {
	const replicas, down = 3, 5
	for _, p := range []scheduler.Catchup{scheduler.CatchupNone, scheduler.CatchupLast, scheduler.CatchupAll} {
		t.Run(string(p), func(t *testing.T) {
			bubble(t, func(t *testing.T, e *harness) {
				// A max_skew of 100ms keeps the slots older than 100ms at restart
				// in catch-up's hands; the default 2s would claim the last two live.
				skew := scheduler.WithSkewLimits(50*time.Millisecond, 100*time.Millisecond)
				key := "starts"
				// A misfire grace of 1s: a slot the policy does not run is
				// recorded missed once its grace has passed on Redis's clock
				// (a lagging replica may claim it until then), within the
				// 2s this test waits.
				table := []scheduler.Job{{Name: "report", Schedule: "@every 1s", Catchup: p, LeaseTTL: time.Second, MisfireGrace: time.Second}}
				fns := map[string]jobs.Func{"report": recorder(e.rdb, key, 10*time.Millisecond)}
				var running []*replica
				for r := range replicas {
					running = append(running, e.start(fmt.Sprintf("r%d", r), registry(t, fns), table, skew))
				}
				time.Sleep(2500 * time.Millisecond) // a few slots run
				for _, r := range running {
					r.stop()
				}
				states, err := e.store.JobStates(context.Background(), []string{"report"})
				if err != nil || states["report"].Last.IsZero() {
					t.Fatalf("no slot ran before the stop: %v %v", states, err)
				}
				last := states["report"].Last.Unix()
				// Restart when exactly `down` slots have passed unclaimed: at
				// last+down+0.5s, slots last+1..last+down are older than max_skew,
				// last+down+1 is live.
				sleepUntil(time.Unix(last+down, 0).Add(500 * time.Millisecond))
				for r := range replicas {
					e.start(fmt.Sprintf("again%d", r), registry(t, fns), table, skew)
				}
				time.Sleep(2 * time.Second)

				starts := map[int64]int{}
				for _, s := range e.starts(key) {
					starts[s.slot]++
				}
				ran := 0
				for at := last + 1; at <= last+down; at++ {
					rec, ok := e.record("report", at)
					if !ok {
						t.Errorf("slot %d has no record", at)
						continue
					}
					want, wantState := 0, slot.StateMissed
					if p == scheduler.CatchupAll || p == scheduler.CatchupLast && at == last+down {
						want, wantState = 1, slot.StateDone
					}
					if starts[at] != want || rec.State != wantState {
						t.Errorf("slot %d: %d starts, record %s (%q); want %d starts, %s", at, starts[at], rec.State, rec.Error, want, wantState)
					}
					ran += starts[at]
				}
				t.Logf("catchup %s: %d of %d missed slots ran", p, ran, down)
				// Live slots after the restart run as usual.
				if starts[last+down+1] != 1 {
					t.Errorf("the first live slot after the restart started %d times", starts[last+down+1])
				}
			})
		})
	}
}

// TestBackfillIsChecked: Backfill is for past slots of the job's schedule
// that no replica ran. A slot in the future (its replicas run it at its
// time: run now, it would close that slot early), a time that is not one
// of the schedule's, or one older than the retention (its record may have
// expired: a slot that ran would run again) is refused, before anything is
// claimed, with an error that names it.
func TestBackfillIsChecked(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "0 * * * *", Retention: 48 * time.Hour}}
		fns := map[string]jobs.Func{"j": recorder(h.rdb, "starts", 0)}
		time.Sleep(72 * time.Hour)
		hour := time.Now().Truncate(time.Hour)
		for i, tc := range []struct {
			at   time.Time
			want string
		}{
			{hour.Add(time.Hour), "is in the future"},
			{hour.Add(-time.Hour + 17*time.Minute), `is not a time of the schedule "0 * * * *"`},
			{hour.Add(-time.Hour + 500*time.Millisecond), `is not a time of the schedule "0 * * * *"`},
			{hour.Add(-49 * time.Hour), "older than the job's retention (48h0m0s)"},
		} {
			s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
			if err != nil {
				t.Fatal(err)
			}
			ok := hour.Add(-time.Duration(2+i) * time.Hour) // with a good slot first: nothing is claimed, not even it
			res, err := s.Backfill(context.Background(), "j", []time.Time{ok, tc.at}, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.at.UTC().Format(time.RFC3339Nano)) {
				t.Errorf("Backfill of %v: %+v, %v; want an error naming it: %q", tc.at.UTC(), res, err, tc.want)
			}
			for _, at := range []time.Time{ok, tc.at} {
				if rec, found := h.record("j", at.Unix()); found {
					t.Errorf("Backfill of %v refused, but slot %v has a record: %+v", tc.at.UTC(), at.UTC(), rec)
				}
			}
		}
		s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"))
		if err != nil {
			t.Fatal(err)
		}
		ok := []time.Time{hour.Add(-47 * time.Hour), hour}
		if res, err := s.Backfill(context.Background(), "j", ok, 1); err != nil || len(res) != 2 || res[0].State != slot.StateDone || res[1].State != slot.StateDone {
			t.Errorf("Backfill of %v (within the retention, and the current slot): %+v, %v; want both run, done", ok, res, err)
		}
	})
}

// TestBackfillJudgesSlotsOnRedisClock: Backfill checks its slots against
// Redis's clock, not its own. Before, a process whose clock lagged Redis's
// by 1s (within max_skew) backfilled a slot whose done record had just
// expired, and ran it a second time; one whose clock ran 10 minutes ahead
// ran a slot 5 minutes before its time, closing it for the replicas.
func TestBackfillJudgesSlotsOnRedisClock(t *testing.T) {
	table := []scheduler.Job{{Name: "tick", Schedule: "@every 10s", MisfireGrace: 5 * time.Second, CatchupWindow: 30 * time.Second, Retention: time.Minute}}
	for _, tc := range []struct {
		name   string
		offset time.Duration // the backfilling process's clock, from Redis's
		ran    bool          // the slot ran before the backfill, on a replica
		after  time.Duration // when the backfill asks for it, from the slot, on Redis's clock
		want   string
	}{
		// The done record expired at the slot + 1m (its retention); the
		// process's clock reads the slot + 59.5s.
		{"behind, past the retention", -time.Second, true, time.Minute + 500*time.Millisecond, "is older than the job's retention (1m0s), less max_skew (2s)"},
		// Within the retention less max_skew, the slot's record is there:
		// the backfill finds it, and runs nothing.
		{"behind, within the retention", -time.Second, true, time.Minute - 2500*time.Millisecond, ""},
		{"ahead within max_skew, slot in the future", 1500 * time.Millisecond, false, -time.Second, "is in the future on Redis's clock"},
		{"ahead past max_skew", 10 * time.Minute, false, -5 * time.Minute, "this machine's clock is 10m0s ahead of Redis's, more than max_skew (2s)"},
		{"behind past max_skew", -3 * time.Second, false, 20 * time.Second, "this machine's clock is 3s behind Redis's, more than max_skew (2s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				const key = "starts"
				fns := map[string]jobs.Func{"tick": recorder(h.rdb, key, 0)}
				at := nextSecond(0).Truncate(10 * time.Second).Add(20 * time.Second)
				if tc.ran {
					r1 := h.start("r1", registry(t, fns), table)
					sleepUntil(at.Add(time.Second))
					r1.stop()
					if rec, ok := h.record("tick", at.Unix()); !ok || rec.State != slot.StateDone {
						t.Fatalf("slot %v: record %+v, %v; want done", at.UTC(), rec, ok)
					}
				}
				sleepUntil(at.Add(tc.after))
				s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"),
					scheduler.WithClock(newStepClock(tc.offset)))
				if err != nil {
					t.Fatal(err)
				}
				res, err := s.Backfill(context.Background(), "tick", []time.Time{at}, 1)
				switch {
				case tc.want == "" && (err != nil || len(res) != 1 || res[0].Outcome != slot.OutcomeLost):
					t.Errorf("Backfill: %+v, %v; want the slot lost to its record", res, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("Backfill: %+v, %v; want an error saying %q", res, err, tc.want)
				}
				want := 0
				if tc.ran {
					want = 1
				}
				n := 0
				for _, st := range h.starts(key) {
					if st.slot == at.Unix() {
						n++
					}
				}
				if n != want {
					t.Errorf("slot %v started %d times; want %d", at.UTC(), n, want)
				}
				if rec, ok := h.record("tick", at.Unix()); ok != tc.ran && !strings.Contains(tc.name, "past the retention") {
					t.Errorf("slot %v: record %+v, %v", at.UTC(), rec, ok)
				}
			})
		})
	}
}

// TestBackfillSlotsThatAgeOut: Redis checks each backfill claim's slot
// against the retention as it decides it. A backfill of two slots of a job
// that runs one at a time waits 15 minutes for the first one's run; by then
// the second is older than the retention (1h) less max_skew: its record may
// have expired, so Redis refuses it and records nothing. Before, the check
// was made once, before the first claim, and the second slot ran.
func TestBackfillSlotsThatAgeOut(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "* * * * *", Retention: time.Hour, CatchupWindow: time.Minute}}
		fns := map[string]jobs.Func{"j": recorder(h.rdb, "starts", 15*time.Minute)}
		time.Sleep(2 * time.Hour)
		minute := time.Now().Truncate(time.Minute)
		slots := []time.Time{minute.Add(-58 * time.Minute), minute.Add(-50 * time.Minute)}
		s, err := scheduler.New(h.store, registry(t, fns), scheduler.WithJobs(table...), scheduler.WithReplicaID("cli"),
			scheduler.WithLeaseTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Backfill(context.Background(), "j", slots, 1)
		if err != nil || len(res) != 2 {
			t.Fatalf("Backfill: %+v, %v", res, err)
		}
		if res[0].Outcome != slot.OutcomeWon || res[0].State != slot.StateDone {
			t.Errorf("first slot: %+v; want won, done", res[0])
		}
		if !errors.Is(res[1].Err, slot.ErrPastRetention) || res[1].Outcome != "" {
			t.Errorf("second slot, 65 minutes old when claimed: %+v; want Err wrapping slot.ErrPastRetention", res[1])
		} else {
			t.Logf("second slot: %v", res[1].Err)
		}
		if rec, ok := h.record("j", slots[1].Unix()); ok {
			t.Errorf("second slot has a record: %+v", rec)
		}
		if starts := h.starts("starts"); len(starts) != 1 || starts[0].slot != slots[0].Unix() {
			t.Errorf("starts %+v; want only the first slot's", starts)
		}
	})
}

// TestACatchupBesideAShorterRetention: r2 (retention 1h) catches up 10 slots after an outage, one at a time, each run holding 3
// minutes. Meanwhile a replica of another config (retention 1m; simulated
// through the store, as a rolling deploy's old replica would do) runs the
// second catch-up slot, last+20, at once: its record is written with a
// retention of 1m, and Redis marks that retention in the job's state. When
// r2's first run ends, 3 minutes in, that record has expired. r2's bounded
// catch-up claim of last+20 is refused by Redis (kept: 1m); a catch-up
// claims such a slot again unbounded only while a record written since it
// was planned cannot have expired (runner.stale), judged by that 1m, not
// r2's own 1h: 3 minutes on, it may have, so r2 does not run it. Before
// (found by a review), r2 judged by its own 1h and ran the slot again.
func TestACatchupBesideAShorterRetention(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", Catchup: scheduler.CatchupAll, CatchupWindow: 10 * time.Minute,
			Overlap: scheduler.OverlapAllow, LeaseTTL: 2 * time.Second, MisfireGrace: 5 * time.Second, Retention: time.Hour}}
		reg := func() *jobs.Registry {
			return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 3*time.Minute)})
		}
		last := lastRan(t, h, "j", reg(), table)
		sleepUntil(time.Unix(last+105, 0))
		h.start("r2", reg(), table)
		time.Sleep(5 * time.Second) // r2 runs last+10, for 3 minutes

		// The other config's replica runs last+20 (retention 1m) and finishes.
		at := time.Unix(last+20, 0)
		c := slot.Claim{Kind: slot.ClaimCatchup, Job: "j", Slot: at, Replica: "old-config", LeaseTTL: 2 * time.Second,
			Retention: time.Minute, AllowOverlap: true} // unbounded, as that replica's catch-up claims it once Redis refuses the bound
		res, err := h.store.Claim(context.Background(), []slot.Claim{c})
		if err != nil || res[0].Err != nil || res[0].Outcome != slot.OutcomeWon {
			t.Fatalf("the other config's claim of last+20: %+v %v", res, err)
		}
		if err := h.store.Finish(context.Background(), []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}})[0]; err != nil {
			t.Fatal(err)
		}

		time.Sleep(5 * time.Minute) // r2's first run ends at last+285; last+20's record expired at about last+170
		n := 0
		for _, s := range h.starts("starts") {
			if s.slot == last+20 {
				n++
			}
		}
		if n > 0 {
			t.Errorf("slot last+20, run and finished done by a replica with a retention of 1m, was started again by r2's catch-up %d time(s) "+
				"(Redis refused its bounded claim, naming the 1m mark)", n)
		}
	})
}

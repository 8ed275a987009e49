package scheduler_test

import (
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestSteppedClockDecidesNothing: one replica's clock is stepped 10 minutes
// ahead (an NTP step), later 10 minutes behind, while another replica's is
// right. The stepped replica must not decide any slot: no slot recorded
// skipped or missed ahead of time, none run early. Every slot starts once,
// on time, on the healthy replica. Both with overlap skip and allow.
func TestSteppedClockDecidesNothing(t *testing.T) {
	for _, overlap := range []scheduler.Overlap{scheduler.OverlapSkip, scheduler.OverlapAllow} {
		t.Run(string(overlap), func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				key := "starts"
				table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", Overlap: overlap, LeaseTTL: time.Second}}
				reg := func() *jobs.Registry {
					return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 10*time.Millisecond)})
				}
				stepped := h.start("stepped", reg(), table, scheduler.WithClockCheckEvery(time.Minute))
				h.start("healthy", reg(), table)
				first := nextSecond(500 * time.Millisecond)
				sleepUntil(first.Add(2500 * time.Millisecond))
				stepped.clock.step(10 * time.Minute)
				sleepUntil(first.Add(20*time.Second + 500*time.Millisecond))
				stepped.clock.step(-20 * time.Minute)
				sleepUntil(first.Add(40*time.Second + 500*time.Millisecond))

				runs := map[int64][]start{}
				for _, s := range h.starts(key) {
					runs[s.slot] = append(runs[s.slot], s)
				}
				for at := first.Unix(); at < first.Unix()+40; at++ {
					rec, ok := h.record("j", at)
					if len(runs[at]) != 1 || !ok || rec.State != slot.StateDone {
						t.Errorf("slot %d: runs %+v, record %s %q (found %v); want 1 run, done", at, runs[at], rec.State, rec.Error, ok)
						continue
					}
					if d := rec.Started.Sub(time.Unix(at, 0)); d < 0 || d > 100*time.Millisecond {
						t.Errorf("slot %d started %v from its time, on %s", at, d, rec.Owner)
					}
				}
				// Nothing was decided ahead of time: no record beyond the run.
				future := time.Now().Add(time.Second).Unix()
				for at := future; at < future+600; at++ {
					if rec, ok := h.record("j", at); ok {
						t.Fatalf("slot %d, in the future, already has a record: %+v", at, rec)
					}
				}
			})
		})
	}
}

// TestRefusedSlotsStillEndWithARecord: Redis's clock is 5 minutes off from
// every replica's (more than max_skew), so every replica refuses to claim.
// The slots must still end with a record: missed, saying why; Redis decides
// when, on its own clock.
func TestRefusedSlotsStillEndWithARecord(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", MisfireGrace: 20 * time.Second}}
		reg := func() *jobs.Registry { return registry(t, quiet(t)) }
		for _, id := range []string{"a", "b"} {
			h.startWith(id, replicaOpts{offset: -5 * time.Minute}, reg(), table)
		}
		// The replicas' clocks read 5 minutes ago; while they refuse, they go
		// by Redis's clock, so their slots are Redis's (before, they took the
		// slots of 5 minutes ago for the live ones, and those after their
		// start kept no record for 5 minutes). Give the slots they refuse
		// their misfire grace on Redis's clock, plus a margin.
		begin := time.Now()
		time.Sleep(2 * time.Minute)
		end := time.Now().Add(-30 * time.Second)
		n := 0
		for at := begin.Add(10 * time.Second).Truncate(10 * time.Second); at.Before(end); at = at.Add(10 * time.Second) {
			rec, ok := h.record("j", at.Unix())
			if !ok || rec.State != slot.StateMissed || rec.Error == "" {
				t.Errorf("slot %s: record %+v (found %v); want missed, with the reason", at.Format(time.TimeOnly), rec, ok)
			}
			n++
		}
		if n < 5 {
			t.Fatalf("only %d slots checked", n)
		}
		rec, _ := h.record("j", begin.Add(30*time.Second).Truncate(10*time.Second).Unix())
		t.Logf("a refused slot's record: %s: %s", rec.State, rec.Error)
	})
}

// TestProbeAcrossAPartition: a replica's network freezes, as in a
// partition, for 10.7s. Its claims time out after 5s, so it probes Redis's
// clock; the probe waits for the thaw, and Redis answers it then, 4.9s after
// it was sent. The offset that probe computes (Redis's time minus the middle
// of the round trip: 2.45s) says nothing of the clocks: a replica that took
// it for its offset would refuse to claim, over max_skew (2s), until its next
// probe a minute later. It must claim again at once after the thaw.
func TestProbeAcrossAPartition(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := "starts"
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s"}}
		reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 0)}) }
		events := &eventLog{}
		cut := h.start("cut", reg(), table, events.option())
		h.start("healthy", reg(), table)
		first := nextSecond(500 * time.Millisecond)
		sleepUntil(first.Add(200 * time.Millisecond))
		cut.net.freeze()
		sleepUntil(first.Add(10900 * time.Millisecond))
		cut.net.thaw()
		back := time.Now()
		time.Sleep(10 * time.Second)

		if offset, ok := cut.s.Offset(); !ok || max(offset, -offset) > 250*time.Millisecond {
			t.Errorf("after the thaw the cut replica's offset is %v (measured: %v); its clock is Redis's", offset, ok)
		}
		if drift := events.of(t, scheduler.EventDrift); len(drift) != 0 {
			t.Errorf("drift events %+v; no clock drifted", drift)
		}
		won := 0
		for _, s := range h.starts(key) {
			if s.replica == "cut" && time.Unix(s.slot, 0).After(back) {
				won++
			}
		}
		if won == 0 {
			t.Errorf("the cut replica won none of the 10 slots after the thaw")
		}
	})
}

// TestSkewedStartLeavesLiveSlotsToTheLiveReplica: a replica runs with its
// clock 1.9s behind Redis's, and another starts with its clock 1.9s ahead:
// each within the max_skew of 2s, 3.8s apart. The starting replica takes
// the slots before its start, less max_skew, for missed (catchup: none),
// while the lagging one has yet to claim them, well within their misfire
// grace: they must be recorded missed only once their grace has passed on
// Redis's clock, so the lagging replica runs them. And the starting
// replica's live claims reach Redis up to 1.9s before their slot's time,
// while the previous slot's run holds the job: such a slot must not be
// recorded skipped, since at its time that run has ended. Every slot runs
// once, none is missed or skipped.
func TestSkewedStartLeavesLiveSlotsToTheLiveReplica(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := "starts"
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 2 * time.Second, Catchup: scheduler.CatchupNone, MisfireGrace: 10 * time.Second}}
		reg := func() *jobs.Registry {
			return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 10*time.Millisecond)})
		}
		h.startWith("lagging", replicaOpts{offset: -1900 * time.Millisecond}, reg(), table)
		time.Sleep(10*time.Second + 300*time.Millisecond)
		start := time.Now()
		h.startWith("ahead", replicaOpts{offset: 1900 * time.Millisecond}, reg(), table)
		time.Sleep(20 * time.Second)
		from := start.Truncate(time.Second).Add(-5 * time.Second)
		h.eachSlot("j", key, from.Unix(), from.Unix()+20, func(at int64, r slot.Record, starts int) {
			if r.State != slot.StateDone || starts != 1 {
				t.Errorf("slot %s (the second replica started at %s): %s by %s %q, %d starts; want done once",
					time.Unix(at, 0).UTC().Format(time.TimeOnly), start.UTC().Format("15:04:05.000"), r.State, r.Owner, r.Error, starts)
			}
		})
	})
}

package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// goneCatchup checks the catch-up slots last+10..last+100 while a replica
// is cut off: each has a record, none started twice, and those that did not
// run were recorded missed by a peer that saw gone's heartbeat go stale. It
// returns how many ran or are running (started once), and how many a peer
// recorded so.
func goneCatchup(t *testing.T, h *harness, last int64, gone string) (started, recorded int) {
	t.Helper()
	starts := map[int64]int{}
	for _, s := range h.starts("starts") {
		starts[s.slot]++
	}
	for at := last + 10; at <= last+100; at += 10 {
		rec, ok := h.record("j", at)
		switch {
		case !ok:
			t.Errorf("slot %d, in %s's catch-up, has no record", at, gone)
		case starts[at] > 1:
			t.Errorf("slot %d started %d times", at, starts[at])
		case starts[at] == 1:
			started++
		case rec.State == slot.StateMissed && strings.Contains(rec.Error, gone+" stopped heartbeating before its catch-up reached it"):
			recorded++
		default:
			t.Errorf("slot %d: %s %q, %d starts", at, rec.State, rec.Error, starts[at])
		}
	}
	return started, recorded
}

// TestAKilledReplicasCatchupIsRecordedByAPeer: after an outage, r1 catches
// up 10 slots, one at a time; r2 starts 20 s later, once live slots have
// run, so it planned none of them. 40 s in, r1 is cut off for good, as a
// SIGKILL or a lost host would leave it: it records nothing as it dies, and
// the job's state already holds later slots, so no later start plans the
// ones it had not reached. Once r1's heartbeat is stale, r2 must record
// them missed, saying whose catch-up they were in. Before, they kept no
// record. r1 then comes back (it was only paused): it must not run a slot
// that r2 recorded.
func TestAKilledReplicasCatchupIsRecordedByAPeer(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		last, table, reg := catchupOutage(t, h)
		r1 := h.start("r1", reg(), table)
		time.Sleep(20 * time.Second)
		metrics := sdkmetric.NewManualReader()
		h.start("r2", reg(), table, scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
		time.Sleep(20 * time.Second)
		r1.net.freeze()
		time.Sleep(2 * time.Minute) // stale after three heartbeats (15 s); takeovers read running slots once a minute
		started, recorded := goneCatchup(t, h, last, "r1")
		if started < 1 || recorded < 5 {
			t.Errorf("%d catch-up slots started, %d recorded missed by r2; want the first to start, and at least 5 recorded", started, recorded)
		}
		if n := claimsOf(t, metrics, "missed"); n != int64(recorded) {
			t.Errorf("r2's slotcron.claims{outcome=missed}: %d; want the %d slots it recorded", n, recorded)
		}
		t.Logf("before r1 comes back: %d started, %d recorded missed by r2", started, recorded)

		r1.net.thaw()
		time.Sleep(5 * time.Minute) // r1's catch-up would have run them all
		if s, m := goneCatchup(t, h, last, "r1"); s != started || m != recorded {
			t.Errorf("after r1 came back: %d started, %d recorded missed; want %d and %d, unchanged", s, m, started, recorded)
		}
	})
}

// TestAKilledReplicasCatchupIsLeftToAPeerThatHoldsIt: r1 and r2 start
// together after the outage, so both planned the same catch-up; r1 is cut
// off 30 s in. r2 runs every slot of it. A replica that sees r1's heartbeat
// go stale must not record missed the slots that a catch-up is about to
// run: r2 itself (its own), or r3, started 20 s later with none (r2's).
// Mid deploy, r3 runs a new table (j unchanged, k added): r2, of r1's
// table, still holds the slots (counting only the peers of its own table
// as holders, r3 recorded missed the slots r2 was about to run).
func TestAKilledReplicasCatchupIsLeftToAPeerThatHoldsIt(t *testing.T) {
	for _, c := range []struct{ name, r3 string }{{"its own", ""}, {"a live peer's", "same"}, {"a live peer's, seen from a changed table", "changed"}} {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				last, table, reg := catchupOutage(t, h)
				r1 := h.start("r1", reg(), table)
				h.start("r2", reg(), table)
				time.Sleep(20 * time.Second)
				switch c.r3 {
				case "same":
					h.start("r3", reg(), table)
				case "changed":
					newTable := append([]scheduler.Job{table[0]}, scheduler.Job{Name: "k", Schedule: "@every 1h"})
					h.start("r3", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 25*time.Second), "k": recorder(h.rdb, "k", 0)}), newTable)
				}
				time.Sleep(10 * time.Second)
				r1.net.freeze()
				time.Sleep(5 * time.Minute) // r2 runs the rest, one at a time
				if started, recorded := goneCatchup(t, h, last, "r1"); started != 10 || recorded != 0 {
					t.Errorf("%d catch-up slots started, %d recorded missed; want all 10 started, by r2 after r1 was cut off", started, recorded)
				}
			})
		})
	}
}

// TestAKilledReplicasSuccessorRecordsItsCatchup: r1 catches up alone and
// is killed 40 s in; its pod starts again under the same ID once its
// heartbeat is stale. The job's state holds the live slots r1 ran while
// catching up, so the successor plans none of the old catch-up; it moves
// its predecessor's entry aside as it replaces it, and records missed the
// slots the predecessor had not reached. Before, with no peer, they kept no
// record. The successor's first heartbeat may fail after its script ran:
// in its second round trip, or with the script's reply lost; the slots
// must be recorded all the same (before, the heartbeat that replaced the
// entry was its only read, and either failure lost it). A successor that
// starts 3 minutes later (a lost host's pod rescheduled, a crash loop's
// backoff: past ten stale windows, when the entry used to be removed, by
// the successor's own first heartbeat) does the same.
func TestAKilledReplicasSuccessorRecordsItsCatchup(t *testing.T) {
	for _, c := range []struct {
		name       string
		fail, lose bool
		gap        time.Duration // from the kill to the successor's start
	}{
		{"its first heartbeat answered", false, false, 20 * time.Second},
		{"the lists failed", true, false, 20 * time.Second},
		{"the reply lost", true, true, 20 * time.Second},
		{"started again 3 minutes later", false, false, 3 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				last, table, reg := catchupOutage(t, h)
				r1 := h.start("r1", reg(), table)
				time.Sleep(40 * time.Second)
				r1.net.freeze()
				time.Sleep(c.gap) // its heartbeat is stale
				f := &failFirstHeartbeat{lose: c.lose}
				f.failed.Store(!c.fail)
				h.startWith("r1", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { f.Store = s; return f }}, reg(), table)
				time.Sleep(time.Minute)
				if !f.failed.Load() {
					t.Fatal("the successor's first heartbeat did not fail")
				}
				started, recorded := goneCatchup(t, h, last, "r1")
				if started < 1 || recorded < 5 || started+recorded != 10 {
					t.Errorf("%d catch-up slots started, %d recorded missed by r1's successor; want the first to start, and the rest (at least 5) recorded",
						started, recorded)
				}
				t.Logf("%d started, %d recorded missed by r1's successor", started, recorded)
			})
		})
	}
}

// TestAKilledLoneReplicasOutageIsRecorded: after an outage of 10 slots, r1
// starts alone and plans to record missed those its catch-up policy does
// not run, each once its misfire grace (2 minutes) has passed on Redis's
// clock. 20 s in, before the first grace has passed, it is cut off for
// good, and its pod starts again under the same ID once its heartbeat is
// stale. The job's state holds the live slots r1 ran, so the successor
// plans none of the outage: it must record missed, from its predecessor's
// entry, the slots that had no record. Before, r1 published only the slots
// it had yet to run, so with catchup none it published nothing, and with
// catchup last only the last: the others kept no record, with nothing
// said. With a catch-up window of 30 s, the slots older than it are in the
// outage too.
func TestAKilledLoneReplicasOutageIsRecorded(t *testing.T) {
	for _, c := range []struct {
		name    string
		catchup scheduler.Catchup
		window  time.Duration
		runs    int // of the outage's slots, by r1's catch-up
	}{
		{"catchup none", scheduler.CatchupNone, 10 * time.Minute, 0},
		{"catchup last", scheduler.CatchupLast, 10 * time.Minute, 1},
		{"catchup none, older than the window", scheduler.CatchupNone, 30 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", Catchup: c.catchup, CatchupWindow: c.window,
					Overlap: scheduler.OverlapAllow, LeaseTTL: 2 * time.Second, MisfireGrace: 2 * time.Minute}}
				reg := func() *jobs.Registry {
					return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", time.Second)})
				}
				last := lastRan(t, h, "j", reg(), table)
				time.Sleep(time.Minute)
				sleepUntil(time.Unix(last+105, 0)) // slots last+10..last+100 missed
				r1 := h.start("r1", reg(), table)
				time.Sleep(20 * time.Second) // the first grace ends at last+130
				r1.net.freeze()
				time.Sleep(20 * time.Second) // its heartbeat is stale
				h.start("r1", reg(), table)
				time.Sleep(3 * time.Minute) // the last grace ended at last+220
				ran, recorded := goneCatchup(t, h, last, "r1")
				if ran != c.runs || recorded != 10-c.runs {
					t.Errorf("%d of the outage's slots ran, %d were recorded missed by r1's successor; want %d and %d", ran, recorded, c.runs, 10-c.runs)
				}
				// The successor's own outage (the slots of r1's kill) is
				// answered too: it publishes no range any more.
				reg2, err := h.store.Registry(context.Background(), 3*scheduler.DefaultHeartbeatEvery)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range reg2.Replicas {
					if p.ID == "r1" && reg2.Now.Sub(p.Seen) < 3*scheduler.DefaultHeartbeatEvery && len(p.Catchup) > 0 {
						t.Errorf("r1's successor, its outage answered, still publishes %v", p.Catchup)
					}
				}
			})
		})
	}
}

// TestAReplicaKilledBeforeItsFirstHeartbeatLeavesItsCatchupRecorded: r1
// starts alone after an outage of 10 slots, all within its catch-up window,
// so it plans to run them all and to record none missed. It starts a second
// before a live slot, which it claims while the first catch-up slot runs
// (the job's state then holds that later slot, so no later start plans the
// outage), and it is cut off for good 3 s in, before its first heartbeat
// after startup (every 5 s). Its pod starts again under the same ID once its
// heartbeat is stale: the successor must record missed, from its
// predecessor's entry, the slots the predecessor had not reached. Before,
// startup beat at once only when slots were to be recorded missed: the
// entry held the registration's heartbeat, sent before the plan, with no
// catch-up range, and 9 slots kept no record, with nothing said.
func TestAReplicaKilledBeforeItsFirstHeartbeatLeavesItsCatchupRecorded(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		last, table, reg := catchupOutage(t, h)
		sleepUntil(time.Unix(last+109, 0)) // the live slot last+110 is due a second after the start
		r1 := h.start("r1", reg(), table)
		time.Sleep(3 * time.Second)
		if _, ok := h.record("j", last+110); !ok {
			t.Fatal("the live slot after r1's start has no record: the test no longer covers a state that holds a later slot")
		}
		r1.net.freeze()
		time.Sleep(20 * time.Second) // its heartbeat is stale
		h.start("r1", reg(), table)
		time.Sleep(time.Minute)
		started, recorded := goneCatchup(t, h, last, "r1")
		if started != 1 || recorded != 9 {
			t.Errorf("%d catch-up slots started, %d recorded missed by r1's successor; want the first to start, and the other 9 recorded", started, recorded)
		}
	})
}

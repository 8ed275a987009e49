package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// goneFaults is r2's store in the tests of a failed settle: once armed, it
// fails the first read of the gone replica's slots (Redis did not answer:
// nothing written), or loses the reply of the first claim that records
// them (Redis wrote the records; the replica does not know).
type goneFaults struct {
	*slotstore.Store
	upTo     time.Time // the gone catch-up's last slot
	loseSend bool      // lose a claim's reply, rather than fail a read
	armed    atomic.Bool
	fired    atomic.Int32
}

func (g *goneFaults) ofGone(job string, at time.Time) bool { return job == "j" && !at.After(g.upTo) }

func (g *goneFaults) Missing(ctx context.Context, refs []slot.Ref) ([]int, error) {
	if !g.loseSend && g.armed.Load() && len(refs) > 0 && g.ofGone(refs[0].Job, refs[0].At) && g.fired.CompareAndSwap(0, 1) {
		return nil, errors.New("read tcp: i/o timeout (injected)")
	}
	return g.Store.Missing(ctx, refs)
}

func (g *goneFaults) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	res, err := g.Store.Claim(ctx, claims)
	if g.loseSend && err == nil && g.armed.Load() && len(claims) > 0 && claims[0].Kind == slot.ClaimMiss &&
		g.ofGone(claims[0].Job, claims[0].Slot) && g.fired.CompareAndSwap(0, 1) {
		return nil, errors.New("read tcp: i/o timeout (injected, after Redis ran the claims)")
	}
	return res, err
}

// TestAKilledReplicasCatchupIsRecordedAfterAFailedTry: as in
// TestAKilledReplicasCatchupIsRecordedByAPeer, r1 is cut off mid catch-up
// and r2 settles its entry; but r2's first try fails. When its read of the
// slots' records fails, nothing is written: it must say so at WARN and try
// again at its next heartbeat, or the slots keep no record (they did,
// with the entry marked settled after a failure). When the reply to its
// claims is lost, Redis wrote the records: the next try must find them
// and write nothing twice.
func TestAKilledReplicasCatchupIsRecordedAfterAFailedTry(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "a failed read", true: "a lost reply"}[lose], func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				last, table, reg := catchupOutage(t, h)
				faults := &goneFaults{upTo: time.Unix(last+100, 0), loseSend: lose}
				var logs lines
				metrics := sdkmetric.NewManualReader()
				r1 := h.start("r1", reg(), table)
				time.Sleep(20 * time.Second)
				h.startWith("r2", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { faults.Store = s; return faults }},
					reg(), table, scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))),
					scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
				time.Sleep(20 * time.Second)
				faults.armed.Store(true)
				r1.net.freeze()
				time.Sleep(2 * time.Minute)
				if faults.fired.Load() != 1 {
					t.Fatalf("the fault did not fire: r2 never settled r1's entry")
				}
				started, recorded := goneCatchup(t, h, last, "r1")
				if started < 1 || started+recorded != 10 {
					t.Errorf("%d catch-up slots started, %d recorded missed by r2; want the first to start, and the rest recorded", started, recorded)
				}
				var warned int
				for _, l := range logs.all() {
					if strings.Contains(l, "level=WARN") && strings.Contains(l, "cannot yet record the catch-up slots that r1 had not reached") {
						warned++
					}
				}
				if warned != 1 {
					t.Errorf("%d WARN lines saying r2 tries again; want 1:\n%s", warned, strings.Join(logs.all(), "\n"))
				}
				// A lost reply's claims count as errors: r2 cannot know that
				// Redis recorded them, and its next try finds them recorded.
				want, errs := int64(recorded), int64(0)
				if lose {
					want, errs = 0, int64(recorded)
				}
				if n, e := claimsOf(t, metrics, "missed"), claimsOf(t, metrics, "error"); n != want || e != errs {
					t.Errorf("r2's slotcron.claims: missed %d, error %d; want %d and %d", n, e, want, errs)
				}
				t.Logf("%d started, %d recorded missed by r2", started, recorded)
			})
		})
	}
}

// TestAKilledReplicasCatchupPastTheRetentionIsLoud: r1 starts after an
// outage and is killed 40 s into its catch-up, with 8 slots unreached. No
// other replica of the table runs until r2 starts 130 s later, when r1's
// entry is stale but still in the registry. By then more than the job's
// retention (less twice max_skew) has passed since r1 planned its range:
// a record written since (a slot r1 ran after its last heartbeat, or after
// a pause) may have expired, so a slot with no record may have run. r2
// must not record any of them missed; it must say at ERROR that they keep
// no record, and count each in slotcron.claims{outcome=past_retention}.
func TestAKilledReplicasCatchupPastTheRetentionIsLoud(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", Catchup: scheduler.CatchupAll, CatchupWindow: 2 * time.Minute,
			Retention: 2*time.Minute + scheduler.DefaultMaxSkew, Overlap: scheduler.OverlapAllow, LeaseTTL: 2 * time.Second,
			MisfireGrace: 5 * time.Second}}
		reg := func() *jobs.Registry {
			return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "starts", 25*time.Second)})
		}
		last := lastRan(t, h, "j", reg(), table)
		time.Sleep(time.Minute)
		sleepUntil(time.Unix(last+105, 0))
		r1 := h.start("r1", reg(), table)
		time.Sleep(40 * time.Second)
		r1.net.freeze()
		time.Sleep(90 * time.Second) // stale, not yet removed (15 minutes after its last heartbeat)
		var logs lines
		metrics := sdkmetric.NewManualReader()
		h.start("r2", reg(), table, scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))),
			scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		time.Sleep(30 * time.Second)

		starts := map[int64]int{}
		for _, s := range h.starts("starts") {
			starts[s.slot]++
		}
		unreached := 0
		for at := last + 10; at <= last+100; at += 10 {
			rec, ok := h.record("j", at)
			switch {
			case starts[at] > 1:
				t.Errorf("slot %d started %d times", at, starts[at])
			case starts[at] == 1:
			case ok:
				t.Errorf("slot %d, which did not start, was recorded %s %q past the retention", at, rec.State, rec.Error)
			default:
				unreached++
			}
		}
		if unreached < 5 {
			t.Errorf("%d catch-up slots unreached by r1; want at least 5", unreached)
		}
		var errLines []string
		for _, l := range logs.all() {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, "r1 stopped heartbeating before its catch-up was done") {
				errLines = append(errLines, l)
			}
		}
		if len(errLines) != 1 || !strings.Contains(errLines[0], fmt.Sprintf("past_retention=%d", unreached)) {
			t.Errorf("ERROR lines about r1's catch-up: %q; want one, with past_retention=%d", errLines, unreached)
		}
		if n, m := claimsOf(t, metrics, "past_retention"), claimsOf(t, metrics, "missed"); n != int64(unreached) || m != 0 {
			t.Errorf("r2's slotcron.claims: past_retention %d, missed %d; want %d and 0", n, m, unreached)
		}
	})
}

// TestAKilledReplicasCatchupIsLeftToItsHolderPastTheListedJobs: with more
// jobs than a heartbeat lists (500), each replica publishes the catch-up of
// 500 of them, not the same 500. r1 and r2 start together after an outage
// of 520 jobs, and both planned the same catch-up; r1 is cut off 20 s in.
// r2 settles r1's entry: it must leave every slot its own catch-up holds,
// those of the jobs its heartbeat does not list included, and run them all.
// Reading only what its heartbeat lists, it recorded missed the slots of
// about 20 jobs that it was about to run. (Every 10 minutes, so that no
// live slot falls due while they catch up: 520 jobs cost the test's
// Redis enough as it is.)
func TestAKilledReplicasCatchupIsLeftToItsHolderPastTheListedJobs(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		const n = 520
		var table []scheduler.Job
		fns := map[string]jobs.Func{}
		for i := range n {
			name := fmt.Sprintf("j%03d", i)
			table = append(table, scheduler.Job{Name: name, Schedule: "@every 10m", Catchup: scheduler.CatchupAll,
				CatchupWindow: time.Hour, Overlap: scheduler.OverlapAllow, LeaseTTL: 20 * time.Second, MisfireGrace: 5 * time.Second})
			fns[name] = recorder(h.rdb, "starts", 50*time.Second)
		}
		reg := func() *jobs.Registry { return registry(t, fns) }
		before := h.start("before", reg(), table)
		time.Sleep(10*time.Minute + 5*time.Second)
		before.stop()
		states, err := h.store.JobStates(context.Background(), []string{"j000"})
		if err != nil || states["j000"].Last.IsZero() {
			t.Fatalf("no slot ran before the outage: %v %v", states, err)
		}
		last := states["j000"].Last.Unix()
		sleepUntil(time.Unix(last+2100, 0)) // last+600, +1200 and +1800 missed
		r1 := h.start("r1", reg(), table)
		h.start("r2", reg(), table)
		time.Sleep(20 * time.Second)
		r1.net.freeze()
		time.Sleep(3 * time.Minute) // r2 runs the rest, one slot of a job at a time; the next live slot is at last+2400

		starts := map[string]int{}
		for _, s := range h.starts("starts") {
			starts[fmt.Sprintf("%s@%d", s.job, s.slot)]++
		}
		var bad []string
		for i := range n {
			name := fmt.Sprintf("j%03d", i)
			for _, at := range []int64{last + 600, last + 1200, last + 1800} {
				rec, ok := h.record(name, at)
				if k := starts[fmt.Sprintf("%s@%d", name, at)]; !ok || k != 1 {
					bad = append(bad, fmt.Sprintf("%s@%d: %s %q, %d starts", name, at, rec.State, rec.Error, k))
				}
			}
		}
		if len(bad) > 0 {
			t.Errorf("%d of %d catch-up slots did not start once; want every one run (r2 holds them all), e.g. %s",
				len(bad), 3*n, strings.Join(bad[:min(3, len(bad))], "; "))
		}
	})
}

// TestAKilledReplicasCatchupIsRecordedByAPeerOfAnotherTable: a deploy
// that changes the table, mid catch-up. r1, of the old table, is killed
// 40 s into its catch-up; r2 runs the new one, which adds a job k. Its
// job j is r1's, with the same settings: r2 must record j's unreached
// slots missed, as a replica of r1's table would (before, it only said at
// WARN that it would not, and the 8 slots kept no record). When the deploy
// changed j too, r2 cannot tell r1's slots from its own: it must say at
// ERROR that they keep no record, since no replica of r1's table is live.
// The same holds for r1's successor under its ID (its pod started again
// with the new table), which reads r1's list before its own replaces it.
func TestAKilledReplicasCatchupIsRecordedByAPeerOfAnotherTable(t *testing.T) {
	for _, c := range []struct {
		name      string
		changed   bool
		successor string
	}{{"the job unchanged", false, "r2"}, {"the job changed", true, "r2"}, {"r1's successor", false, "r1"}} {
		changed := c.changed
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				last, table, reg := catchupOutage(t, h)
				r1 := h.start("r1", reg(), table)
				time.Sleep(40 * time.Second)
				r1.net.freeze()
				if c.successor == "r1" {
					time.Sleep(20 * time.Second) // its heartbeat is stale
				}
				newTable := append([]scheduler.Job{table[0]}, scheduler.Job{Name: "k", Schedule: "@every 1h"})
				if changed {
					newTable[0].Timeout = time.Hour
				}
				fns := map[string]jobs.Func{"j": recorder(h.rdb, "starts", 25*time.Second), "k": recorder(h.rdb, "k", 0)}
				var logs lines
				h.start(c.successor, registry(t, fns), newTable,
					scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
				time.Sleep(time.Minute) // r1 is stale 15 s after its last heartbeat
				var errLines []string
				for _, l := range logs.all() {
					if strings.Contains(l, "level=ERROR") && strings.Contains(l, "r1") && strings.Contains(l, "keep no record") {
						errLines = append(errLines, l)
					}
				}
				if !changed {
					started, recorded := goneCatchup(t, h, last, "r1")
					if started < 1 || started+recorded != 10 {
						t.Errorf("%d catch-up slots started, %d recorded missed by r2; want the first to start, and the rest recorded", started, recorded)
					}
					if len(errLines) != 0 {
						t.Errorf("ERROR lines: %q; want none", errLines)
					}
					return
				}
				unrecorded := 0
				for at := last + 10; at <= last+100; at += 10 {
					if _, ok := h.record("j", at); !ok {
						unrecorded++
					}
				}
				if unrecorded < 5 || len(errLines) != 1 || !strings.Contains(errLines[0], "slotcron.job=j") {
					t.Errorf("%d slots of r1's catch-up have no record; ERROR lines about them: %q; want at least 5, and one line naming j",
						unrecorded, errLines)
				}
			})
		})
	}
}

// failFirstHeartbeat is a store whose first heartbeat runs, and then fails
// as if its second round trip (the job lists) had: the registry read by
// the script comes back with the error. (failed set beforehand: none fails.)
type failFirstHeartbeat struct {
	*slotstore.Store
	lose   bool // lose the script's reply: nothing read comes back
	failed atomic.Bool
}

func (f *failFirstHeartbeat) Heartbeat(ctx context.Context, me slot.Replica, stale time.Duration) (slot.Registry, error) {
	reg, err := f.Store.Heartbeat(ctx, me, stale)
	if err == nil && f.failed.CompareAndSwap(false, true) {
		if f.lose {
			return slot.Registry{}, errors.New("slotstore: sending the heartbeat: i/o timeout (injected, after Redis ran the script)")
		}
		return reg, errors.New("slotstore: sending the heartbeat: the job lists: i/o timeout (injected)")
	}
	return reg, err
}

package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// leadLog records, for each live claim a replica sends, how long before its
// slot's time it went out (fake time: exact; negative: after it), and
// whether it was marked Ahead. The tests' one wrapper of Store.Claim.
type leadLog struct {
	mu    sync.Mutex
	leads map[int64][]lead
	// unidentified counts claims sent without the token and run ID their
	// run would take (a hedged claim gets them only when it is sent).
	unidentified int
	// stall, while set, makes each claim call hang for 5s, then answer
	// every claim with a timeout, as a Redis that stopped answering would.
	stall atomic.Bool
}

type lead struct {
	by        time.Duration // the slot's time minus when the claim went out
	ahead     bool
	contested bool
}

func newLeadLog() *leadLog { return &leadLog{leads: map[int64][]lead{}} }

func (l *leadLog) wrap(s *slotstore.Store) scheduler.Claimer { return leadClaimer{s, l} }

type leadClaimer struct {
	*slotstore.Store
	l *leadLog
}

func (lc leadClaimer) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	now := time.Now()
	lc.l.mu.Lock()
	for _, c := range claims {
		if c.Kind != slot.ClaimMiss && c.Kind != slot.ClaimExpire && (c.Token == "" || c.RunID == "") {
			lc.l.unidentified++
		}
		if c.Kind == slot.ClaimLive {
			lc.l.leads[c.Slot.Unix()] = append(lc.l.leads[c.Slot.Unix()], lead{c.Slot.Sub(now), c.Ahead, c.Contested})
		}
	}
	lc.l.mu.Unlock()
	if lc.l.stall.Load() {
		time.Sleep(5 * time.Second)
		res := make([]slot.Result, len(claims))
		for i := range res {
			res[i].Err = errors.New("i/o timeout")
		}
		return res, nil
	}
	return lc.Store.Claim(ctx, claims)
}

// contested returns how many live claims were sent, and how many of them
// were marked Contested.
func (l *leadLog) contested() (claims, contested int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ls := range l.leads {
		for _, c := range ls {
			claims++
			if c.contested {
				contested++
			}
		}
	}
	return claims, contested
}

// of returns the claims sent for the slot at unix second at.
func (l *leadLog) of(at int64) []lead {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lead(nil), l.leads[at]...)
}

// reset forgets every claim seen so far.
func (l *leadLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leads, l.unidentified = map[int64][]lead{}, 0
}

// split returns how many live claims went out before, at and after their
// slot's time; it fails t when one was marked Ahead wrongly.
func (l *leadLog) split(t *testing.T) (early, onTime, late int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for at, ls := range l.leads {
		for _, c := range ls {
			switch {
			case c.by > 0:
				early++
			case c.by == 0:
				onTime++
			default:
				late++
			}
			if c.ahead != (c.by > 0) {
				t.Errorf("slot %v: a live claim sent %v before its time marked ahead: %v", time.Unix(at, 0).UTC(), c.by, c.ahead)
			}
		}
	}
	return early, onTime, late
}

// noID is how many claims went out without their token and run ID.
func (l *leadLog) noID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unidentified
}

// TestClaimAhead: a replica sends each live claim ahead of its slot's time,
// by what WithClaimAhead says (by default, the 2ms floor here: a claim
// batch takes no fake time) but at most a quarter of the job's period, or
// at the slot's time when it is negative; a
// won slot's job starts exactly at the slot's time either way, and its
// record says so.
func TestClaimAhead(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []scheduler.Option
		want time.Duration
	}{
		{"default", nil, 2 * time.Millisecond},
		{"200ms", []scheduler.Option{scheduler.WithClaimAhead(200 * time.Millisecond)}, 200 * time.Millisecond},
		// At most a quarter of the job's period (1s) ahead.
		{"600ms, capped by the period", []scheduler.Option{scheduler.WithClaimAhead(600 * time.Millisecond)}, 250 * time.Millisecond},
		{"off", []scheduler.Option{scheduler.WithClaimAhead(-1)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				runs := &runLog{runs: map[int64][]ran{}}
				leads := newLeadLog()
				table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
				h.startWith("r1", replicaOpts{claimer: leads.wrap}, registry(t, map[string]jobs.Func{"tick": runs.fn()}), table, tc.opts...)
				from := nextSecond(0).Add(3 * time.Second)
				to := from.Add(10 * time.Second)
				sleepUntil(to.Add(time.Second))
				synctest.Wait()
				for at, r := range runs.between(t, from, to) {
					if r.delay != 0 {
						t.Errorf("slot %v started %v after its time", time.Unix(at, 0).UTC(), r.delay)
					}
					if ls := leads.of(at); len(ls) != 1 || ls[0].by != tc.want || ls[0].ahead != (tc.want > 0) {
						t.Errorf("slot %v: claims sent %+v before its time, want one, %v before, marked ahead: %v",
							time.Unix(at, 0).UTC(), ls, tc.want, tc.want > 0)
					}
					if rec, ok := h.record("tick", at); !ok || rec.State != slot.StateDone || !rec.Started.Equal(time.Unix(at, 0)) {
						t.Errorf("slot %v: record %+v, want done, started at the slot's time", time.Unix(at, 0).UTC(), rec)
					}
				}
			})
		})
	}
}

// TestClaimAheadLimitedByMaxSkew: Redis refuses a claim that is more than
// max_skew ahead of its clock, so a replica sends its claims at most half of
// what max_skew leaves beside its measured clock offset ahead: with max_skew
// 400ms and a clock 100ms fast, 150ms, whatever WithClaimAhead asks. No
// claim is refused as early, and every slot starts at its time on the
// replica's clock.
func TestClaimAheadLimitedByMaxSkew(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		runs := &runLog{runs: map[int64][]ran{}}
		leads := newLeadLog()
		events := &eventLog{}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		const fast = 100 * time.Millisecond
		h.startWith("r1", replicaOpts{offset: fast, claimer: leads.wrap}, registry(t, map[string]jobs.Func{"tick": runs.fn()}), table,
			scheduler.WithClaimAhead(time.Second), scheduler.WithSkewLimits(50*time.Millisecond, 400*time.Millisecond), events.option())
		from := nextSecond(0).Add(3 * time.Second) // the offset has been measured
		to := from.Add(10 * time.Second)
		sleepUntil(to.Add(time.Second))
		synctest.Wait()
		for at, r := range runs.between(t, from, to) {
			if r.delay != -fast { // the bubble's clock is 100ms behind the replica's
				t.Errorf("slot %v started %v after its time on the bubble's clock, want -%v (its time on the replica's)", time.Unix(at, 0).UTC(), r.delay, fast)
			}
			// The lead is on the bubble's clock: the replica's, plus its offset.
			if ls := leads.of(at); len(ls) != 1 || ls[0].by != 150*time.Millisecond+fast {
				t.Errorf("slot %v: claims sent %+v before its time on the bubble's clock, want one, %v", time.Unix(at, 0).UTC(), ls, 150*time.Millisecond+fast)
			}
		}
	})
}

// TestClaimAheadWaitsForTheRunningSlot: a job every second whose run takes
// 950ms. A claim sent 200ms ahead finds the previous run still holding the
// job: it is told busy, records nothing, and goes again at the slot's time,
// when that run has ended, and wins. The job's next 8 slots are then
// claimed at their time, one claim each, and the 9th ahead again. No slot
// is recorded skipped: claiming ahead does not change what runs. A run that
// overruns
// its next slot still has that slot recorded skipped, at its time.
func TestClaimAheadWaitsForTheRunningSlot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hold    time.Duration
		skipped bool
	}{
		{"ends before the next slot", 950 * time.Millisecond, false},
		{"overruns the next slot", 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				leads := newLeadLog()
				table := []scheduler.Job{{Name: "long", Schedule: "@every 1s"}}
				h.startWith("r1", replicaOpts{claimer: leads.wrap}, registry(t, map[string]jobs.Func{"long": recorder(h.rdb, "starts", tc.hold)}),
					table, scheduler.WithClaimAhead(200*time.Millisecond))
				from := nextSecond(0).Add(3 * time.Second)
				to := from.Add(20 * time.Second)
				sleepUntil(to.Add(2 * time.Second))
				synctest.Wait()
				started := map[int64]int{}
				var aheadAt []int64 // the slots claimed ahead
				for _, s := range h.starts("starts") {
					started[s.slot]++
				}
				var ran, skipped int
				for at := from.Unix(); at < to.Unix(); at++ {
					rec, ok := h.record("long", at)
					switch {
					case !ok:
						t.Errorf("slot %v has no record", time.Unix(at, 0).UTC())
					case rec.State == slot.StateSkipped:
						skipped++
						if started[at] != 0 {
							t.Errorf("slot %v recorded skipped, and it ran", time.Unix(at, 0).UTC())
						}
					case rec.State == slot.StateDone:
						ran++
						if started[at] != 1 || !rec.Started.Equal(time.Unix(at, 0)) {
							t.Errorf("slot %v done: started %d times, record started %v; want once, at the slot's time", time.Unix(at, 0).UTC(), started[at], rec.Started)
						}
					default:
						t.Errorf("slot %v: record %+v", time.Unix(at, 0).UTC(), rec)
					}
					switch ls := leads.of(at); {
					case len(ls) == 2 && ls[0].by == 200*time.Millisecond && ls[0].ahead && ls[1].by == 0 && !ls[1].ahead:
						aheadAt = append(aheadAt, at) // busy, then again at the slot's time
					case len(ls) == 1 && ls[0].by == 0 && !ls[0].ahead:
					case len(ls) == 1 && ls[0].by == 200*time.Millisecond && ls[0].ahead && tc.skipped:
						// Ahead, with the job free: the run before it was skipped.
					default:
						t.Errorf("slot %v: claims %+v, want one at the slot's time, or one 200ms ahead and one at the slot's time", time.Unix(at, 0).UTC(), ls)
					}
				}
				if !tc.skipped { // (with overruns, an ahead claim that finds the job free wins)
					if len(aheadAt) < 2 {
						t.Errorf("slots claimed ahead, then again at their time: %v, want one in 9", aheadAt)
					}
					for i := 1; i < len(aheadAt); i++ {
						if aheadAt[i]-aheadAt[i-1] != 9 {
							t.Errorf("slots claimed ahead, then again at their time: %v, want one in 9 (8 at their time after each)", aheadAt)
						}
					}
				}
				if tc.skipped {
					if ran < 8 || skipped < 8 {
						t.Errorf("%d slots ran and %d were skipped, want every other one of each", ran, skipped)
					}
				} else if ran != 20 || skipped != 0 {
					t.Errorf("%d slots ran and %d were skipped, want 20 and 0", ran, skipped)
				}
			})
		})
	}
}

// TestClaimAheadStopBeforeTheSlot: a replica that wins a slot ahead and is
// stopped, with no shutdown grace, before the slot's time does not start the
// job early, nor at all: the slot is recorded failed, saying why.
func TestClaimAheadStopBeforeTheSlot(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		runs := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		r := h.start("r1", registry(t, map[string]jobs.Func{"tick": runs.fn()}), table,
			scheduler.WithClaimAhead(250*time.Millisecond), scheduler.WithShutdownGrace(0))
		at := nextSecond(0).Add(3 * time.Second)
		sleepUntil(at.Add(-200 * time.Millisecond)) // won, 50ms ago
		if rec, ok := h.record("tick", at.Unix()); !ok || rec.State != slot.StateRunning {
			t.Fatalf("the slot's record 200ms before its time: %+v, want running (won ahead)", rec)
		}
		r.stop()
		synctest.Wait()
		rec, _ := h.record("tick", at.Unix())
		if rec.State != slot.StateFailed || !strings.Contains(rec.Error, "did not start") {
			t.Errorf("record %+v, want failed: the job did not start", rec)
		}
		runs.mu.Lock()
		defer runs.mu.Unlock()
		if n := len(runs.runs[at.Unix()]); n != 0 {
			t.Errorf("the job ran %d times for a slot whose replica stopped before its time", n)
		}
	})
}

// TestClaimAheadIgnoresTimedOutBatches: a batch of claims that timed out
// (Redis did not answer for 5s) measures the timeout, not Redis: it does not
// count towards how far ahead claims go. Once Redis answers again, claims go
// out by the 2ms floor again, not a quarter of the period ahead.
func TestClaimAheadIgnoresTimedOutBatches(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		leads := newLeadLog()
		// Overlap allowed: the late runs after the stall never make a claim
		// busy (which would have the job's next slots claimed at their time).
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s", Overlap: scheduler.OverlapAllow}}
		h.startWith("r1", replicaOpts{claimer: leads.wrap}, registry(t, map[string]jobs.Func{"tick": func(context.Context, jobs.Run) error { return nil }}), table)
		stall := nextSecond(0).Add(3 * time.Second).Add(-500 * time.Millisecond)
		sleepUntil(stall)
		leads.stall.Store(true) // the claim of the next slot hangs, and times out
		sleepUntil(stall.Add(time.Second))
		leads.stall.Store(false)
		from := stall.Add(8500 * time.Millisecond) // whole seconds, once the backlog has gone
		sleepUntil(from.Add(6 * time.Second))
		synctest.Wait()
		for at := from.Unix(); at < from.Unix()+6; at++ {
			if ls := leads.of(at); len(ls) != 1 || ls[0].by != 2*time.Millisecond {
				t.Errorf("slot %v: claims %+v, want one, 2ms ahead", time.Unix(at, 0).UTC(), ls)
			}
		}
	})
}

// stepOnWin steps its replica's clock by step once a claim of slot at,
// sent ahead, has won: between the win and the run's wait for the slot.
type stepOnWin struct {
	*slotstore.Store
	at    time.Time
	step  time.Duration
	clock *atomic.Pointer[stepClock]
	once  sync.Once
}

func (s *stepOnWin) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	res, err := s.Store.Claim(ctx, claims)
	for i, c := range claims {
		if err == nil && c.Ahead && c.Slot.Equal(s.at) && res[i].Outcome == slot.OutcomeWon {
			s.once.Do(func() { s.clock.Load().step(s.step) })
		}
	}
	return res, err
}

// TestClaimAheadWaitIsBoundedOnAClockStep: the replica's clock steps back
// 10 minutes just after it won a slot 200ms ahead. The run waits at most
// maxAhead (1s) from then, not the 10 minutes its clock now says are left
// before the slot, holding the job meanwhile.
func TestClaimAheadWaitIsBoundedOnAClockStep(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		runs := &runLog{runs: map[int64][]ran{}}
		table := []scheduler.Job{{Name: "tick", Schedule: "@every 1s"}}
		at := nextSecond(0).Add(3 * time.Second)
		var clock atomic.Pointer[stepClock]
		rep := h.startWith("r1", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer {
			return &stepOnWin{Store: s, at: at, step: -10 * time.Minute, clock: &clock}
		}}, registry(t, map[string]jobs.Func{"tick": runs.fn()}), table, scheduler.WithClaimAhead(200*time.Millisecond))
		clock.Store(rep.clock)
		sleepUntil(at.Add(2 * time.Second))
		synctest.Wait()
		runs.mu.Lock()
		defer runs.mu.Unlock()
		// Won at the slot's time - 200ms; started at most 1s later.
		if rs := runs.runs[at.Unix()]; len(rs) != 1 || rs[0].delay > 800*time.Millisecond {
			t.Errorf("slot %v after a 10-minute step back: runs %+v, want one, started at most 800ms after the slot (1s after the win)", at.UTC(), rs)
		}
	})
}

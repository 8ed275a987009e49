package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestDecide covers every outcome of every kind of claim: what the replica
// does with the answer, as a pure function of (claim, result, self). It runs
// without Redis, in microseconds.
func TestDecide(t *testing.T) {
	const self = "me"
	at := time.Unix(1_700_000_000, 0)
	holderSlot := at.Add(-time.Minute)
	claimOf := func(k slot.Kind) slot.Claim {
		c := slot.Claim{Kind: k, Job: "j", Slot: at, Replica: self, LeaseTTL: 15 * time.Second}
		if k == slot.ClaimManual {
			c.Manual = &slot.Manual{ID: "k1"}
		}
		return c
	}
	type want struct {
		outcome     string
		run         bool
		backoff     bool
		retryAfter  time.Duration
		retryIn     time.Duration
		probe       bool
		claimLive   bool
		unbounded   bool
		watch       target
		watchWait   time.Duration
		unwatch     bool
		nextCatchup bool
		level       slog.Level
		logged      bool
	}
	tests := []struct {
		name string
		kind slot.Kind
		res  slot.Result
		want want
	}{
		// Won: run it; a won slot needs no watch.
		{"live won", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeWon, Fence: 7, Attempt: 1},
			want{outcome: "won", run: true, unwatch: true}},
		{"live won, not replicated in time", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeWon, Unreplicated: true},
			want{outcome: "won", run: true, unwatch: true, level: slog.LevelWarn, logged: true}},
		{"catch-up won", slot.ClaimCatchup, slot.Result{Outcome: slot.OutcomeWon},
			want{outcome: "won", run: true, unwatch: true}},
		{"takeover won (attempt+1): said at WARN, as an abandon is", slot.ClaimTakeover, slot.Result{Outcome: slot.OutcomeWon, Attempt: 2},
			want{outcome: "won", run: true, unwatch: true, level: slog.LevelWarn, logged: true}},

		// Lost: watch a running slot in case its owner dies; a finished one is done.
		{"live lost to a running owner", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateRunning},
			want{outcome: "lost", watch: target{at: at}, watchWait: 15 * time.Second, level: slog.LevelDebug, logged: true}},
		{"live lost to a finished slot", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateDone},
			want{outcome: "lost", level: slog.LevelDebug, logged: true}},
		{"live lost to self, running, no run here", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeLost, Holder: self, State: slot.StateRunning},
			want{outcome: "lost", watch: target{at: at}, watchWait: 15 * time.Second, level: slog.LevelWarn, logged: true}},
		{"live lost to self, finished", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeLost, Holder: self, State: slot.StateDone},
			want{outcome: "lost", level: slog.LevelDebug, logged: true}},
		{"catch-up lost: on to the next", slot.ClaimCatchup, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateDone},
			want{outcome: "lost", nextCatchup: true, level: slog.LevelDebug, logged: true}},
		{"catch-up lost to a running owner", slot.ClaimCatchup, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateRunning},
			want{outcome: "lost", watch: target{at: at}, watchWait: 15 * time.Second, nextCatchup: true, level: slog.LevelDebug, logged: true}},
		{"miss lost: it has a record", slot.ClaimMiss, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateDone},
			want{outcome: "lost", level: slog.LevelDebug, logged: true}},

		// Skipped: watch the run that holds the job.
		{"live skipped by another's run", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeSkipped, Holder: "other", HolderSlot: holderSlot, Wait: 4 * time.Second},
			want{outcome: "skipped", watch: target{at: holderSlot}, watchWait: 4 * time.Second, level: slog.LevelInfo, logged: true}},
		{"live skipped by own run", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeSkipped, Holder: self, HolderSlot: holderSlot, Wait: 4 * time.Second},
			want{outcome: "skipped", watch: target{at: holderSlot}, watchWait: 4 * time.Second, level: slog.LevelInfo, logged: true}},

		// Paused: recorded; catch-up goes on to record the next one.
		{"live paused", slot.ClaimLive, slot.Result{Outcome: slot.OutcomePaused, Reason: "paused by ops@host: migration"},
			want{outcome: "paused", level: slog.LevelInfo, logged: true}},
		{"catch-up paused", slot.ClaimCatchup, slot.Result{Outcome: slot.OutcomePaused, Reason: "paused by ops@host"},
			want{outcome: "paused", nextCatchup: true, level: slog.LevelInfo, logged: true}},

		// Busy: try again when the holder's lease would run out, and watch it.
		{"catch-up busy", slot.ClaimCatchup, slot.Result{Outcome: slot.OutcomeBusy, Holder: "other", HolderSlot: holderSlot, Wait: 3 * time.Second},
			want{outcome: "busy", retryAfter: 3 * time.Second, watch: target{at: holderSlot}, watchWait: 3 * time.Second}},
		{"takeover busy, no TTL known", slot.ClaimTakeover, slot.Result{Outcome: slot.OutcomeBusy, Holder: "other", Wait: -1},
			want{outcome: "busy", retryAfter: 15 * time.Second, watchWait: -1}},

		// Missed: recorded; loud when it was a live slot.
		{"live missed past the grace", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeMissed, Late: 2 * time.Minute},
			want{outcome: "missed", level: slog.LevelWarn, logged: true}},
		{"miss recorded by the catch-up policy", slot.ClaimMiss, slot.Result{Outcome: slot.OutcomeMissed},
			want{outcome: "missed", level: slog.LevelInfo, logged: true}},

		// Takeover answers.
		{"takeover alive: look again later", slot.ClaimTakeover, slot.Result{Outcome: slot.OutcomeAlive, Wait: 9 * time.Second},
			want{outcome: "alive", unwatch: true, watch: target{at: at}, watchWait: 9 * time.Second}},
		{"takeover abandoned", slot.ClaimTakeover, slot.Result{Outcome: slot.OutcomeAbandoned, Holder: "dead", Attempt: 1},
			want{outcome: "abandoned", unwatch: true, level: slog.LevelWarn, logged: true}},
		{"takeover closed", slot.ClaimTakeover, slot.Result{Outcome: slot.OutcomeClosed, State: slot.StateDone},
			want{outcome: "closed", unwatch: true}},
		{"takeover gone", slot.ClaimTakeover, slot.Result{Outcome: slot.OutcomeGone},
			want{outcome: "gone", unwatch: true}},

		// Early: nothing recorded; a live claim says this replica's clock runs ahead.
		{"live too early on Redis's clock", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeEarly, Wait: 10 * time.Minute},
			want{outcome: "early", retryIn: 10 * time.Minute, probe: true, level: slog.LevelDebug, logged: true}},
		{"catch-up too early on Redis's clock: claimed live at its time, and on to the next", slot.ClaimCatchup, slot.Result{Outcome: slot.OutcomeEarly, Wait: time.Hour},
			want{outcome: "early", claimLive: true, nextCatchup: true, probe: true, level: slog.LevelDebug, logged: true}},
		{"expire before its deadline", slot.ClaimExpire, slot.Result{Outcome: slot.OutcomeEarly, Wait: 30 * time.Second},
			want{outcome: "early", retryIn: 30 * time.Second}},
		{"live, before its time on Redis's clock, while a run holds the job", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeBusy, Wait: 1500 * time.Millisecond},
			want{outcome: "busy", retryIn: 250 * time.Millisecond}},
		{"a catch-up miss before its slot's misfire grace has passed", slot.ClaimMiss, slot.Result{Outcome: slot.OutcomeEarly, Wait: 8 * time.Second},
			want{outcome: "early", retryIn: 8 * time.Second}},
		{"expire after its deadline: recorded missed", slot.ClaimExpire, slot.Result{Outcome: slot.OutcomeMissed},
			want{outcome: "missed", level: slog.LevelWarn, logged: true}},
		{"expire lost: a replica ran it", slot.ClaimExpire, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateDone},
			want{outcome: "lost", level: slog.LevelDebug, logged: true}},

		// No answer: back off and send it again, for every kind.
		{"live error", slot.ClaimLive, slot.Result{Err: errors.New("i/o timeout")},
			want{outcome: "error", backoff: true, level: slog.LevelWarn, logged: true}},
		{"catch-up error", slot.ClaimCatchup, slot.Result{Err: errors.New("i/o timeout")},
			want{outcome: "error", backoff: true, level: slog.LevelWarn, logged: true}},
		{"catch-up past its retention less MaxEarly: again now, unbounded", slot.ClaimCatchup, slot.Result{Err: fmt.Errorf("claim: %w", slot.ErrPastRetention)},
			want{outcome: "old", unbounded: true, level: slog.LevelDebug, logged: true}},
		{"miss error", slot.ClaimMiss, slot.Result{Err: errors.New("i/o timeout")},
			want{outcome: "error", backoff: true, level: slog.LevelWarn, logged: true}},
		{"takeover error", slot.ClaimTakeover, slot.Result{Err: errors.New("i/o timeout")},
			want{outcome: "error", backoff: true, level: slog.LevelWarn, logged: true}},
		// Manual slots: like live ones, watched by their ID.
		{"manual won", slot.ClaimManual, slot.Result{Outcome: slot.OutcomeWon},
			want{outcome: "won", run: true, unwatch: true}},
		{"manual asked again while it runs", slot.ClaimManual, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateRunning},
			want{outcome: "lost", watch: target{manual: "k1"}, watchWait: 15 * time.Second, level: slog.LevelDebug, logged: true}},
		{"manual asked again after it ran", slot.ClaimManual, slot.Result{Outcome: slot.OutcomeLost, Holder: "other", State: slot.StateDone},
			want{outcome: "lost", level: slog.LevelDebug, logged: true}},
		{"live skipped by a manual run", slot.ClaimLive, slot.Result{Outcome: slot.OutcomeSkipped, Holder: "other", HolderManual: "k2", Wait: 4 * time.Second},
			want{outcome: "skipped", watch: target{manual: "k2"}, watchWait: 4 * time.Second, level: slog.LevelInfo, logged: true}},
		{"manual paused", slot.ClaimManual, slot.Result{Outcome: slot.OutcomePaused},
			want{outcome: "paused", level: slog.LevelInfo, logged: true}},
		{"manual error", slot.ClaimManual, slot.Result{Err: errors.New("i/o timeout")},
			want{outcome: "error", backoff: true, level: slog.LevelWarn, logged: true}},
		{"an outcome this version does not know", slot.ClaimLive, slot.Result{Outcome: "throttled"},
			want{outcome: "error", backoff: true, level: slog.LevelError, logged: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(claimOf(tt.kind), tt.res, self)
			got := want{outcome: d.outcome, run: d.run, backoff: d.backoff, retryAfter: d.retryAfter, retryIn: d.retryIn, probe: d.probe,
				claimLive: d.claimLive, unbounded: d.unbounded, watch: d.watch,
				watchWait: d.watchWait, unwatch: d.unwatch, nextCatchup: d.nextCatchup, level: d.level, logged: d.msg != ""}
			if !tt.want.logged {
				got.level = tt.want.level // no line, so no level to compare
			}
			if got != tt.want {
				t.Errorf("decide:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	// Every outcome of package slot is covered, and so is every kind.
	seen := map[string]bool{}
	kinds := map[slot.Kind]bool{}
	for _, tt := range tests {
		seen[string(tt.res.Outcome)] = true
		kinds[tt.kind] = true
	}
	for _, o := range slot.Outcomes {
		if !seen[string(o)] {
			t.Errorf("no case for outcome %s", o)
		}
	}
	for k := slot.ClaimLive; k <= slot.ClaimManual; k++ {
		if !kinds[k] {
			t.Errorf("no case for claim kind %s", k)
		}
	}
}

// TestDecideAheadBusy: a live claim sent ahead of its slot's time that finds
// a run of the job in progress (busy: nothing recorded) goes again at the
// slot's time, when that run may have ended; it does not wait for the
// holder's lease, nor watch it.
func TestDecideAheadBusy(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	c := slot.Claim{Kind: slot.ClaimLive, Job: "j", Slot: at, Replica: "me", LeaseTTL: 15 * time.Second, Ahead: true}
	d := decide(c, slot.Result{Outcome: slot.OutcomeBusy, Holder: "other", HolderSlot: at.Add(-time.Second), Wait: 3 * time.Second}, "me")
	if !d.atSlot || d.run || d.backoff || d.retryAfter != 0 || d.retryIn != 0 || d.watch != (target{}) || d.outcome != "busy" {
		t.Errorf("decide: %+v, want busy, again at the slot's time", d)
	}
}

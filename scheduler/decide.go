package scheduler

import (
	"errors"
	"log/slog"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// outcomeError is the outcome of a claim that got no answer; outcomeRefused
// of a slot that this replica did not claim because its clock is off;
// outcomeRefusedProtocol of one it did not claim because replicas of an
// older slot protocol were live; outcomeOld of a catch-up claim that Redis
// refused as older than its retention less its MaxEarly; outcomeStale of
// one that is not sent again, as it waited a retention since it was planned
// (runner.stale).
const (
	outcomeError           = "error"
	outcomeRefused         = "refused_skew"
	outcomeRefusedProtocol = "refused_protocol"
	outcomeOld             = "old"
	outcomeStale           = "past_retention"
)

// decision is what a replica does with the answer to one claim. decide makes
// it from the claim and its result alone; the runner carries it out (apply).
type decision struct {
	outcome string // the claim's outcome, for the slot span and the claims metric

	run         bool          // start the job under the won lease
	backoff     bool          // the claim failed: send it again after a backoff
	retryAfter  time.Duration // > 0: send the claim again once this much of a lease has run out
	retryIn     time.Duration // > 0: send the claim again after exactly this long
	atSlot      bool          // send the claim again at its slot's time
	probe       bool          // measure the clock against Redis again, now
	claimLive   bool          // the slot is still to come on Redis's clock: claim it live, at its time
	unbounded   bool          // send the claim again now, without its MaxEarly: its slot is long past on Redis's clock
	watch       target        // non-zero: settle this running slot once its owner's lease would expire
	watchWait   time.Duration // how long that lease may still run; -1 when unknown (look soon)
	unwatch     bool          // the claimed slot needs no more watching
	nextCatchup bool          // send the job's next catch-up slot

	level slog.Level // how loud msg is
	msg   string     // "" when there is nothing to log
}

// decide is the scheduler's policy for one answer, as a pure function: the
// same claim, result and replica ID always give the same decision. self is
// this replica's ID: a record that names it, with no run behind it here, is
// watched like anybody else's, so that a run lost with a reply is settled.
func decide(c slot.Claim, res slot.Result, self string) decision {
	if c.Kind == slot.ClaimCatchup && errors.Is(res.Err, slot.ErrPastRetention) {
		// That bound is for a backfill, which cannot know that a slot's
		// record has not expired. A starting replica planned this slot
		// after the job's latest record, so a record of it can only have
		// been written since, and has not expired unless the catch-up has
		// waited a whole retention (apply checks that: runner.stale): the
		// bound that matters here is the early one (bareClaim), and Redis
		// has just shown the slot past.
		return decision{outcome: outcomeOld, unbounded: true, level: slog.LevelDebug,
			msg: "catch-up slot older than its retention less max_skew on Redis's clock: claiming it again without the early bound"}
	}
	if res.Err != nil {
		return decision{outcome: outcomeError, backoff: true, level: slog.LevelWarn, msg: "claim failed; retrying"}
	}
	d := decision{outcome: string(res.Outcome)}
	switch res.Outcome {
	case slot.OutcomeWon:
		d.run, d.unwatch = true, true
		if c.Kind == slot.ClaimTakeover { // on_owner_lost retry: the only word of a dead owner
			d.level, d.msg = slog.LevelWarn, "slot taken over: its owner lost its lease; running the next attempt here"
		}
		if res.Unreplicated {
			d.level, d.msg = slog.LevelWarn, "slot won, but fewer replicas acknowledged the claim than wait_replicas asks: a failover now could lose it and run the slot again"
		}
	case slot.OutcomeLost:
		d.level, d.msg = slog.LevelDebug, "slot lost" // every loser, every tick
		if res.State == slot.StateRunning {
			// Its owner's lease can't run out sooner than one TTL from now.
			d.watch, d.watchWait = targetOf(c), c.LeaseTTL
			if res.Holder == self {
				d.level, d.msg = slog.LevelWarn, "slot recorded running by this replica, with no run here: watching it until its lease runs out"
			}
		}
		d.nextCatchup = c.Kind == slot.ClaimCatchup
	case slot.OutcomeSkipped:
		d.level, d.msg = slog.LevelInfo, "slot skipped: the previous run still holds the job"
		d.watch, d.watchWait = holder(res), res.Wait // settle that run if its owner dies
	case slot.OutcomeMissed:
		d.level, d.msg = slog.LevelWarn, "slot missed"
		if c.Kind == slot.ClaimMiss { // the catch-up policy chose it: expected
			d.level = slog.LevelInfo
		}
	case slot.OutcomePaused:
		d.level, d.msg = slog.LevelInfo, "slot recorded paused: the job is paused"
		d.nextCatchup = c.Kind == slot.ClaimCatchup // each one gets its record
	case slot.OutcomeBusy:
		if c.Kind == slot.ClaimLive && c.Ahead { // at the slot's time, that run may have ended
			d.atSlot = true
			break
		}
		if c.Kind == slot.ClaimLive {
			// Sent at its time on this replica's clock, but before it on
			// Redis's (this clock runs ahead, within max_skew): again soon,
			// until Redis's clock is past the slot's time and decides.
			d.retryIn = min(max(res.Wait, 10*time.Millisecond), 250*time.Millisecond)
			break
		}
		d.retryAfter = max(res.Wait, 0)
		if d.retryAfter == 0 {
			d.retryAfter = c.LeaseTTL
		}
		d.watch, d.watchWait = holder(res), res.Wait
	case slot.OutcomeAlive:
		d.unwatch = true // and watch it again, for as long as the lease has left
		d.watch, d.watchWait = targetOf(c), res.Wait
	case slot.OutcomeAbandoned:
		d.unwatch = true
		d.level, d.msg = slog.LevelWarn, "slot abandoned: its owner lost its lease"
	case slot.OutcomeClosed, slot.OutcomeGone:
		d.unwatch = true
	case slot.OutcomeEarly:
		if c.Kind == slot.ClaimCatchup {
			// A slot still to come on Redis's clock, taken for a missed one
			// by a plan on a clock that was not Redis's: it is a live slot.
			// Claimed live at its time, as the replicas that planned right
			// claim it; the next catch-up slot goes now.
			d.claimLive, d.nextCatchup, d.probe = true, true, true
			d.level, d.msg = slog.LevelDebug, "catch-up claim refused by Redis: its slot is further ahead of Redis's clock than max_skew; claiming it live at its time"
			break
		}
		d.retryIn = max(res.Wait, time.Millisecond)
		if c.Kind != slot.ClaimExpire && c.Kind != slot.ClaimMiss { // Redis's clock says this replica's runs ahead
			d.probe = true // and send says so once per batch, at WARN
			d.level, d.msg = slog.LevelDebug, "claim refused by Redis: the slot is further ahead of Redis's clock than max_skew"
		}
	default:
		d.outcome, d.backoff = outcomeError, true
		d.level, d.msg = slog.LevelError, "claim answered with an unknown outcome; retrying"
	}
	return d
}

// holder is the slot whose run holds the job's lease, as a result names it.
func holder(res slot.Result) target {
	return target{at: res.HolderSlot, manual: res.HolderManual}
}

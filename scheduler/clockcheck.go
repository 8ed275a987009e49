package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// probeSamples is how many round trips a probe takes at most: see probe.
const probeSamples = 3

// probe measures Redis's clock against this replica's, logs when the offset
// is past warn_skew or max_skew, and checks the deployment's epoch: another
// epoch than the one this replica knew means Redis lost its data.
//
// Redis reads its clock somewhere within the round trip, so a sample knows
// the offset to within half of it, and takes the middle. A round trip
// stretched on one side only, by a partition that held the request until it
// healed or by dialling a new connection, makes the middle wrong by up to
// half of it: 4.9s held once made a healthy replica's offset 2.45s, and the
// replica refused to claim for a minute. So a sample whose half round trip
// exceeds warn_skew is taken again, up to probeSamples round trips, and the
// shortest counts. Should a later sample fail, the slow ones are no measure,
// and probe returns the error, keeping the last offset; when all are slow
// (a slow link), the shortest counts all the same.
func (s *Scheduler) probe(ctx context.Context) error {
	var p slot.Probe
	var t0, t1 time.Time
	var m1 time.Time // real (monotonic) time at t1: a later sample's end is not t1's
	for i := range probeSamples {
		a := s.cfg.clock.Now()
		q, err := s.claimer.Probe(ctx)
		if err != nil {
			if i > 0 {
				return fmt.Errorf("a probe of Redis's clock took %v, too long to measure it, and another failed: %w", t1.Sub(t0).Round(time.Millisecond), err)
			}
			return err
		}
		b, m := s.cfg.clock.Now(), time.Now()
		if i == 0 || b.Sub(a) < t1.Sub(t0) {
			p, t0, t1, m1 = q, a, b, m
		}
		if t1.Sub(t0)/2 <= s.cfg.warnSkew {
			break
		}
	}
	offset := p.Now.Sub(t0.Add(t1.Sub(t0) / 2))
	_, wasRefused := s.refused()
	s.offsetMu.Lock()
	s.offset, s.measured = offset, true
	s.rtt = t1.Sub(t0)
	s.probedWall, s.probedMono = t1.Round(0), m1
	known := s.epoch
	s.epoch = p.Epoch
	s.offsetMu.Unlock()
	s.tel.offset(offset)
	abs := max(offset, -offset)
	attrs := []any{"slotcron.replica", s.cfg.replica, "offset", offset.String(),
		"warn_skew", s.cfg.warnSkew.String(), "max_skew", s.cfg.maxSkew.String()}
	switch {
	case abs > s.cfg.maxSkew:
		s.log.Error("clock offset from Redis is above max_skew: this replica refuses to claim until it is fixed", attrs...)
		if !wasRefused {
			s.emit(Event{ID: s.cfg.replica + "/drift/" + strconv.FormatInt(t1.UnixMilli(), 10), Kind: EventDrift, At: t1,
				Error: fmt.Sprintf("clock offset from Redis %v is above max_skew %v: this replica refuses to claim", offset.Round(time.Millisecond), s.cfg.maxSkew)})
		}
	case abs > s.cfg.warnSkew:
		s.log.Warn("clock offset from Redis is above warn_skew", attrs...)
	}
	switch {
	case known != "" && known != p.Epoch:
		s.dataLossOf(known, "the deployment's epoch in Redis changed", "previous_epoch", known, "epoch", p.Epoch)
	case known == "" && p.Created:
		s.log.Info("Redis held no epoch for this key prefix: a first deployment, or data lost while no replica ran",
			"slotcron.replica", s.cfg.replica, "epoch", p.Epoch)
	}
	s.checkShards(ctx)
	return nil
}

// shardChecker is what a store on a Redis Cluster offers besides Probe
// (slotstore.Store.CheckShards): the deployment's epoch lives on one shard,
// so the others' losses are found by an epoch of their own each.
type shardChecker interface {
	CheckShards(ctx context.Context) ([]slot.ShardLoss, error)
}

// checkShards reports each shard of a Redis Cluster that lost data since the
// last check, as probe reports a changed epoch, when the store can tell (the
// check is not timed: it is no part of the clock's measure).
func (s *Scheduler) checkShards(ctx context.Context) {
	sc, ok := s.claimer.(shardChecker)
	if !ok {
		return
	}
	lost, err := sc.CheckShards(ctx)
	for _, l := range lost {
		s.dataLossOf(l.Epoch, "the epoch of the Redis Cluster shard of "+l.Shard+" changed", "shard", l.Shard)
	}
	if err != nil {
		s.log.Warn("checking the Redis Cluster's shards for data loss", "slotcron.replica", s.cfg.replica, "error", err)
	}
}

// runDataLoss reports, as dataLoss does, that Redis lost the record of a
// run of this replica, once per run: its renewal and its finish may both
// find it, in either order.
func (s *Scheduler) runDataLoss(l slot.Lease, why string, attrs ...any) {
	if _, reported := s.lostRuns.LoadOrStore(l.Token(), true); reported {
		s.log.Warn("Redis lost data: "+why+" (reported already for this run)", attrs...)
		return
	}
	s.dataLoss(why, attrs...)
}

// dataLoss reports, loudly, that Redis lost data this replica relied on.
func (s *Scheduler) dataLoss(why string, attrs ...any) {
	s.offsetMu.Lock()
	epoch := s.epoch
	s.offsetMu.Unlock()
	s.dataLossOf(epoch, why, attrs...)
}

// dataLossOf is dataLoss of the data written under epoch, the deployment's
// epoch that was lost: every replica that knew it reports the same event ID.
func (s *Scheduler) dataLossOf(epoch, why string, attrs ...any) {
	s.emit(Event{ID: "data_loss/" + epoch, Kind: EventDataLoss, Error: "Redis lost data: " + why})
	s.tel.dataLost()
	s.log.Error("Redis lost data: "+why+"; slot records, leases and fence counters written before may be gone, "+
		"so a slot still within its misfire grace may run again (see the README's guarantees)",
		append([]any{"slotcron.replica", s.cfg.replica}, attrs...)...)
}

// clockStepped reports whether this replica's clock has moved, since the
// last probe, by more than warn_skew other than real time has (an NTP step,
// an operator's date): its offset from Redis is no longer known. Real time is
// the monotonic clock, which steps do not move.
func (s *Scheduler) clockStepped() (time.Duration, bool) {
	now := s.cfg.clock.Now()
	s.offsetMu.Lock()
	wall, mono := s.probedWall, s.probedMono
	s.offsetMu.Unlock()
	if mono.IsZero() {
		return 0, false
	}
	drift := now.Round(0).Sub(wall) - time.Since(mono)
	return drift, max(drift, -drift) > s.cfg.warnSkew
}

// refused reports whether claims are refused: the last measured offset is
// above max_skew.
func (s *Scheduler) refused() (time.Duration, bool) {
	offset, ok := s.Offset()
	return offset, ok && s.overMaxSkew(offset)
}

// overMaxSkew reports whether a measured offset from Redis's clock is past
// max_skew: a replica so far off claims nothing.
func (s *Scheduler) overMaxSkew(offset time.Duration) bool {
	return max(offset, -offset) > s.cfg.maxSkew
}

// now is the time a runner goes by (runnerClock): this replica's clock, or,
// while it is off Redis's by more than max_skew, Redis's clock as the last
// probe measured it: the offset added to this replica's clock as it read
// at that probe, carried on by real (monotonic) time since, so that the
// clock being set right (a step) does not move it until it is measured
// again.
func (s *Scheduler) now() time.Time {
	s.offsetMu.Lock()
	refused := s.measured && s.overMaxSkew(s.offset)
	wall, mono, offset := s.probedWall, s.probedMono, s.offset
	s.offsetMu.Unlock()
	if refused {
		return wall.Add(offset + time.Since(mono))
	}
	return s.cfg.clock.Now()
}

// runnerClock is the clock a runner plans, queues and dispatches by
// (Scheduler.now): the replica's own while it is within max_skew of
// Redis's, Redis's while it is not. A replica whose clock is off claims
// nothing but takeovers and the claims that Redis decides on its own clock
// (expire and miss claims); those, its live slots as they come and the
// slots it plans at start then follow Redis's time, not a clock known to
// be wrong: a replica that starts with its clock an hour ahead does not
// take the next hour's slots for past ones, and, its clock set right,
// claims Redis's next slot rather than one an hour away. Its timers are
// the replica's clock's.
type runnerClock struct{ s *Scheduler }

func (c runnerClock) Now() time.Time                 { return c.s.now() }
func (c runnerClock) NewTimer(d time.Duration) Timer { return c.s.cfg.clock.NewTimer(d) }

// probeSoon asks the clock loop to probe now rather than at its next period:
// after claims failed (Redis may have restarted), or when they are refused.
func (s *Scheduler) probeSoon() {
	select {
	case s.probeNow <- struct{}{}:
	default:
	}
}

// clockLoop probes every clock check period, and when asked, until ctx ends.
func (s *Scheduler) clockLoop(ctx context.Context) {
	for {
		t := s.cfg.clock.NewTimer(s.cfg.clockCheckEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-s.probeNow:
			t.Stop()
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.claimTimeout)
		if err := s.probe(cctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot measure the clock against Redis", "error", err)
		}
		cancel()
	}
}

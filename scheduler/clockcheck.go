package scheduler

import (
	"context"
	"time"
)

// measureOffset measures Redis's clock against this replica's (one round
// trip, halved) and logs when it is past warn_skew or max_skew.
func (s *Scheduler) measureOffset(ctx context.Context) error {
	t0 := s.cfg.clock.Now()
	redisNow, err := s.claimer.Time(ctx)
	if err != nil {
		return err
	}
	t1 := s.cfg.clock.Now()
	offset := redisNow.Sub(t0.Add(t1.Sub(t0) / 2))
	s.offsetMu.Lock()
	s.offset, s.measured = offset, true
	s.offsetMu.Unlock()
	s.tel.offset(offset)
	abs := max(offset, -offset)
	attrs := []any{"slotcron.replica", s.cfg.replica, "offset", offset.String(),
		"warn_skew", s.cfg.warnSkew.String(), "max_skew", s.cfg.maxSkew.String()}
	switch {
	case abs > s.cfg.maxSkew:
		s.log.Error("clock offset from Redis is above max_skew: this replica refuses to claim until it is fixed", attrs...)
	case abs > s.cfg.warnSkew:
		s.log.Warn("clock offset from Redis is above warn_skew", attrs...)
	}
	return nil
}

// refused reports whether claims are refused: the last measured offset is
// above max_skew.
func (s *Scheduler) refused() (time.Duration, bool) {
	offset, ok := s.Offset()
	return offset, ok && max(offset, -offset) > s.cfg.maxSkew
}

// clockLoop measures the offset every clock check period until ctx ends.
func (s *Scheduler) clockLoop(ctx context.Context) {
	for {
		t := s.cfg.clock.NewTimer(s.cfg.clockCheckEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.claimTimeout)
		if err := s.measureOffset(cctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot measure the clock against Redis", "error", err)
		}
		cancel()
	}
}

package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// olderGate keeps a Backfill or RunManual from claiming while a replica of
// an older slot protocol is live, as the replicas that run the table do
// (dispatch): it reads the registry before the first claim, and again
// before a claim once a heartbeat period has passed since it last read it,
// so a replica of an older protocol that starts meanwhile (a rollback)
// stops it within one period, as it stops them at their next heartbeat.
type olderGate struct {
	r       *runner
	what    string
	checked time.Time // when the registry was last read with no older replica in it
}

// check reads the registry when a heartbeat period has passed since it
// last found no older replica (or it never read it), and returns an error
// wrapping ErrOlderProtocol when it finds one, or the read's error after
// retries, or ctx's.
func (g *olderGate) check(ctx context.Context) error {
	s := g.r.s
	now := s.cfg.clock.Now()
	if since := now.Sub(g.checked); !g.checked.IsZero() && since >= 0 && since < s.cfg.heartbeatEvery {
		return nil
	}
	var reg slot.Registry
	var err error
	for tries := 0; ; tries++ {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.claimTimeout)
		reg, err = s.claimer.Registry(cctx, s.staleAfter())
		cancel()
		if err == nil || tries == 5 || ctx.Err() != nil || !g.r.sleep(ctx, backoff(tries)) {
			break
		}
	}
	switch older := reg.Older(); {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("scheduler: %s: cannot tell whether replicas of an older slot protocol are live, so claiming nothing: %w", g.what, err)
	case len(older) > 0:
		g.r.log.Error(g.what+": claiming nothing: replicas of an older slot protocol are live", "older", strings.Join(older, ","))
		return fmt.Errorf("%w (%s): %s claims nothing beside them: stop them (finish the upgrade), or run it with their version",
			ErrOlderProtocol, strings.Join(older, ", "), g.what)
	}
	g.checked = now
	return nil
}

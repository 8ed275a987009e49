package scheduler

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
)

// slowProbe answers probes with Redis's clock equal to this machine's, each
// round trip taking the next of rtts (the last one thereafter).
type slowProbe struct {
	nopClaimer
	rtts []time.Duration
	i    int
}

func (s *slowProbe) Probe(context.Context) (slot.Probe, error) {
	d := s.rtts[min(s.i, len(s.rtts)-1)]
	s.i++
	time.Sleep(d / 2)
	now := time.Now()
	time.Sleep(d / 2)
	return slot.Probe{Now: now, Epoch: "slow"}, nil
}

// TestASlowProbeIsNotAStep: on a slow link (every half round trip over
// warn_skew) the probe takes its samples again and keeps the shortest, the
// first here. No clock stepped, so clockStepped must not say one did
// (the runner would probe again before each pass of its loop, and log a
// step each time). Before, the probe paired the first sample's end on the
// clock with real time read after the last sample: 1.6s apart here, a
// "step" of 1.6s right after every probe.
func TestASlowProbeIsNotAStep(t *testing.T) {
	// In a bubble: the round trips' sleeps pass on its fake clock, at once.
	synctest.Test(t, func(t *testing.T) {
		reg := jobs.NewRegistry()
		if err := reg.Register("j", func(context.Context, jobs.Run) error { return nil }); err != nil {
			t.Fatal(err)
		}
		c := &slowProbe{rtts: []time.Duration{600 * time.Millisecond, 800 * time.Millisecond, 800 * time.Millisecond}}
		s, err := New(c, reg, WithJobs(Job{Name: "j", Schedule: "@every 1s"}), WithReplicaID("r1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.probe(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c.i != probeSamples {
			t.Fatalf("%d samples taken; want %d, each slow", c.i, probeSamples)
		}
		if drift, stepped := s.clockStepped(); stepped {
			t.Errorf("clockStepped right after a probe, with no step: drift %v", drift)
		}
	})
}

package scheduler

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
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

// downProbe answers probes with this machine's clock (the bubble's), or,
// while down, fails them as a Redis that does not answer; it counts them.
type downProbe struct {
	nopClaimer
	down   bool
	probes int
}

func (d *downProbe) Probe(context.Context) (slot.Probe, error) {
	d.probes++
	if d.down {
		return slot.Probe{}, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	}
	return slot.Probe{Now: time.Now(), Epoch: "down"}, nil
}

// steppedClock is the bubble's clock, stepped by step.
type steppedClock struct{ step time.Duration }

func (c *steppedClock) Now() time.Time                 { return time.Now().Add(c.step) }
func (c *steppedClock) NewTimer(d time.Duration) Timer { return systemClock{}.NewTimer(d) }

// TestAStepWhileRedisIsDownIsProbedOnceASecond: a replica whose clock steps
// while Redis does not answer probes it once, says so at WARN, and goes on
// without probing again for a second, however many passes and events its
// loop takes meanwhile; then once a second, at DEBUG; and says at INFO when
// a probe measures the clock again. Before, each pass and each event probed,
// waiting up to the claim timeout each time, and logged two WARNs.
func TestAStepWhileRedisIsDownIsProbedOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := jobs.NewRegistry()
		if err := reg.Register("j", func(context.Context, jobs.Run) error { return nil }); err != nil {
			t.Fatal(err)
		}
		c, clk := &downProbe{}, &steppedClock{}
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s, err := New(c, reg, WithJobs(Job{Name: "j", Schedule: "@every 1s"}), WithReplicaID("r1"), WithClock(clk), WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := s.probe(ctx); err != nil {
			t.Fatal(err)
		}
		r := newRunner(s)
		// count is how many lines logged since from hold msg, at level.
		count := func(from int, level, msg string) int {
			return strings.Count(logs.String()[from:], "level="+level+" msg=\""+msg)
		}
		const (
			stepped = "this replica's clock stepped"
			failed  = "cannot measure the clock against Redis"
		)

		clk.step, c.down = time.Hour, true
		for range 10 { // ten passes or events in half a second
			r.measureStep(ctx)
			time.Sleep(50 * time.Millisecond)
		}
		if c.probes != 2 || count(0, "WARN", stepped) != 1 || count(0, "WARN", failed) != 1 {
			t.Fatalf("in the half second after a step, with Redis down: %d probes after the first, a WARN that the clock stepped %d times, that it could not be measured %d times; want 1, 1, 1\n%s",
				c.probes-1, count(0, "WARN", stepped), count(0, "WARN", failed), logs.String())
		}
		from := logs.Len()
		time.Sleep(600 * time.Millisecond) // a second after the failed probe
		r.measureStep(ctx)
		if c.probes != 3 || count(from, "WARN", stepped)+count(from, "WARN", failed) != 0 || count(from, "DEBUG", failed) != 1 {
			t.Fatalf("a second after the failed probe: %d probes after the first, WARN %d, DEBUG %d; want 2 probes, no WARN, one DEBUG\n%s",
				c.probes-1, count(from, "WARN", stepped)+count(from, "WARN", failed), count(from, "DEBUG", failed), logs.String()[from:])
		}

		c.down = false
		from = logs.Len()
		time.Sleep(time.Second)
		r.measureStep(ctx)
		if c.probes != 4 || count(from, "INFO", "measured the clock against Redis again") != 1 {
			t.Fatalf("Redis back: %d probes after the first, %q logged at INFO %d times; want 3, 1\n%s",
				c.probes-1, "measured the clock against Redis again", count(from, "INFO", "measured the clock against Redis again"), logs.String()[from:])
		}
		if _, stillStepped := s.clockStepped(); stillStepped {
			t.Fatal("the step is still unmeasured after a probe that succeeded")
		}
		r.measureStep(ctx)
		if c.probes != 4 {
			t.Fatalf("%d probes after the first with the step measured; want 3", c.probes-1)
		}
	})
}

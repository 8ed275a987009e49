package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// scripted is a Claimer that answers every claim of a job with the outcome
// the job is named after: a stand-in for the store, which the slot contract
// makes possible. Time is off by skew.
type scripted struct {
	skew    time.Duration
	refuse  bool // every batch is refused as invalid
	mu      sync.Mutex
	leases  map[slot.Lease]context.CancelCauseFunc
	answers map[string]int
}

type scriptedLease struct {
	c   slot.Claim
	ctx context.Context
}

func (l *scriptedLease) Job() string              { return l.c.Job }
func (l *scriptedLease) Slot() time.Time          { return l.c.Slot }
func (l *scriptedLease) Replica() string          { return l.c.Replica }
func (l *scriptedLease) RunID() string            { return l.c.RunID }
func (l *scriptedLease) Token() string            { return "token" }
func (l *scriptedLease) Fence() int64             { return 1 }
func (l *scriptedLease) Attempt() int             { return 1 }
func (l *scriptedLease) TTL() time.Duration       { return l.c.LeaseTTL }
func (l *scriptedLease) Context() context.Context { return l.ctx }
func (l *scriptedLease) Deadline() time.Time      { return time.Now().Add(l.c.LeaseTTL) }
func (l *scriptedLease) Proven() bool             { return l.ctx.Err() == nil }
func (l *scriptedLease) Manual() *slot.Manual     { return l.c.Manual }

func (s *scripted) Leave(context.Context, slot.Replica) error { return nil }
func (s *scripted) Registry(context.Context, time.Duration) (slot.Registry, error) {
	return slot.Registry{Now: time.Now()}, nil
}
func (s *scripted) Peek(_ context.Context, claims []slot.Claim) ([]slot.Record, error) {
	return make([]slot.Record, len(claims)), nil // no record: every claim goes out
}
func (s *scripted) Missing(_ context.Context, slots []slot.Ref) ([]int, error) {
	all := make([]int, len(slots)) // no record: every claim goes out
	for i := range all {
		all[i] = i
	}
	return all, nil
}
func (s *scripted) Running(context.Context, []string) (map[string]slot.JobState, error) {
	return nil, nil
}
func (s *scripted) Prepare(context.Context) error { return nil }
func (s *scripted) Probe(context.Context) (slot.Probe, error) {
	return slot.Probe{Now: time.Now().Add(s.skew), Epoch: "scripted"}, nil
}
func (s *scripted) Heartbeat(_ context.Context, me slot.Replica, _ time.Duration) (slot.Registry, error) {
	return slot.Registry{Now: time.Now(), Replicas: []slot.Replica{me}}, nil
}
func (s *scripted) JobStates(context.Context, []string) (map[string]slot.JobState, error) {
	return nil, nil
}

func (s *scripted) Claim(_ context.Context, claims []slot.Claim) ([]slot.Result, error) {
	if s.refuse {
		return nil, errors.New("scripted: the batch is invalid")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]slot.Result, len(claims))
	for i, c := range claims {
		s.answers[c.Job]++
		r := slot.Result{Outcome: slot.Outcome(c.Job), Wait: time.Second, Holder: "other", State: slot.StateRunning}
		switch c.Job {
		case "won":
			ctx, cancel := context.WithCancelCause(context.Background())
			l := &scriptedLease{c: c, ctx: ctx}
			s.leases[l] = cancel
			r.Lease, r.Holder = l, c.Replica
		case "lost", "closed":
			r.State = slot.StateDone
		case "skipped", "busy":
			r.HolderSlot = c.Slot.Add(-time.Second)
		case "error":
			r = slot.Result{Err: errors.New("scripted: no answer"), Wait: -1}
		}
		out[i] = r
	}
	return out, nil
}

func (s *scripted) Renew(_ context.Context, leases []slot.Lease) []error {
	return make([]error, len(leases))
}

func (s *scripted) Finish(_ context.Context, reqs []slot.FinishRequest) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		s.leases[r.Lease](nil)
		delete(s.leases, r.Lease)
	}
	return make([]error, len(reqs))
}

// TestEverySpanEnds runs a replica whose claims get every outcome there is,
// one job per outcome, beside a replica whose clock is off (refused) and one
// whose batches are refused as invalid, and asserts that every span the
// scheduler started has ended once they stop, that every outcome was on a
// root span, and that each root span is named after its kind and its outcome
// ("slot won", "slot lost", "slot skipped", "slot missed"...), one of a fixed
// few names.
func TestEverySpanEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		names := []string{"error", "throttled"} // "throttled": an outcome this version does not know
		for _, o := range slot.Outcomes {
			names = append(names, string(o))
		}
		reg := jobs.NewRegistry()
		var table []scheduler.Job
		for _, n := range names {
			reg.Register(n, func(ctx context.Context, run jobs.Run) error {
				t := time.NewTimer(300 * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				return nil
			})
			table = append(table, scheduler.Job{Name: n, Schedule: "@every 1s", LeaseTTL: time.Second})
		}
		var stops []func()
		run := func(id string, c *scripted) {
			c.leases, c.answers = map[slot.Lease]context.CancelCauseFunc{}, map[string]int{}
			s, err := scheduler.New(c, reg, scheduler.WithReplicaID(id), scheduler.WithJobs(table...),
				scheduler.WithTracerProvider(tp), scheduler.WithClock(newStepClock(0)),
				scheduler.WithLogger(slog.New(slog.DiscardHandler)), scheduler.WithShutdownGrace(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			stops = append(stops, func() { cancel(); <-done })
		}
		run("all-outcomes", &scripted{})
		run("clock-off", &scripted{skew: time.Minute})
		run("refused-batch", &scripted{refuse: true})
		time.Sleep(3500 * time.Millisecond)
		for _, stop := range stops {
			stop()
		}

		ended := map[[8]byte]bool{}
		outcomes := map[string]bool{}
		rootNames := map[string]int{}
		for _, s := range spans.Ended() {
			ended[s.SpanContext().SpanID()] = true
			if s.Parent().IsValid() {
				continue
			}
			outcome := ""
			for _, a := range s.Attributes() {
				if a.Key == "slotcron.outcome" {
					outcome = a.Value.AsString()
				}
			}
			outcomes[outcome] = true
			rootNames[s.Name()]++
			kind, named, _ := strings.Cut(s.Name(), " ")
			if (kind != "slot" && kind != "slot.watch") || named != outcome {
				t.Errorf("root span %q with slotcron.outcome %q: want \"slot %[2]s\" or \"slot.watch %[2]s\"", s.Name(), outcome)
			}
		}
		for name := range rootNames {
			if !scheduler.RootSpanNames[name] {
				t.Errorf("root span named %q: not one of the %d names", name, len(scheduler.RootSpanNames))
			}
		}
		for _, want := range []string{"slot won", "slot lost", "slot skipped", "slot missed", "slot paused",
			"slot busy", "slot early", "slot error", "slot refused_skew", "slot.watch alive"} {
			if rootNames[want] == 0 {
				t.Errorf("no root span named %q; got %v", want, rootNames)
			}
		}
		started := spans.Started()
		for _, s := range started {
			if !ended[s.SpanContext().SpanID()] {
				t.Errorf("span %q (%v) was started and never ended", s.Name(), s.Attributes())
			}
		}
		for _, want := range append(names, "refused_skew") {
			if want == "throttled" {
				want = "error" // an unknown outcome is handled as an error
			}
			if !outcomes[want] {
				t.Errorf("no slot span ended with outcome %q; got %v", want, outcomes)
			}
		}
		t.Logf("%d spans started, all ended; outcomes seen: %d; root span names: %v", len(started), len(outcomes), rootNames)
	})
}

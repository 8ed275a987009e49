package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
)

// Claimer is the slot protocol, as the scheduler uses it. *locking.Slots
// satisfies it; a wrapper can add instrumentation or inject faults.
type Claimer interface {
	// Prepare readies the protocol (loads scripts); called once per Run.
	Prepare(ctx context.Context) error
	// Claim sends a batch of claims in one round trip.
	Claim(ctx context.Context, claims []locking.SlotClaim) ([]locking.ClaimResult, error)
	// Renew renews leases in one round trip; one error per lease.
	Renew(ctx context.Context, leases []*locking.SlotLease) []error
	// Finish records runs' final states in one round trip; one error per run.
	Finish(ctx context.Context, reqs []locking.FinishRequest) []error
	// LastSlots returns each job's latest recorded slot.
	LastSlots(ctx context.Context, jobs []string) (map[string]time.Time, error)
	// Time returns Redis's clock.
	Time(ctx context.Context) (time.Time, error)
}

// Scheduler runs a cron table on one replica. Run it on every replica with the
// same table: for each slot, exactly one replica starts the job.
type Scheduler struct {
	cfg     config
	claimer Claimer
	jobs    []*jobState
	log     *slog.Logger
	tel     *telemetry
	started atomic.Bool

	offsetMu sync.Mutex
	offset   time.Duration // the last measured offset of Redis's clock from ours
	measured bool
}

// jobState is a job of the table, ready to run.
type jobState struct {
	Job
	sched Schedule
	fn    jobs.Func
}

// New returns a Scheduler for the jobs in opts (WithJobs), whose Funcs are in
// registry. It validates everything and reports every problem at once: an
// unknown job name lists the registered ones. It starts no goroutine and
// sends nothing to Redis.
func New(claimer Claimer, registry *jobs.Registry, opts ...Option) (*Scheduler, error) {
	if claimer == nil || registry == nil {
		return nil, errors.New("scheduler: New: nil claimer or registry")
	}
	cfg := defaultConfig()
	var errs []error
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			errs = append(errs, err)
		}
	}
	s := &Scheduler{cfg: cfg, claimer: claimer, log: cfg.logger}
	seen := map[string]bool{}
	for _, j := range cfg.jobs {
		j = j.WithDefaults(cfg.leaseTTL)
		if fe := j.Validate(cfg.maxSkew); len(fe) > 0 {
			errs = append(errs, jobErrors(j, fe))
			continue
		}
		if seen[j.Name] {
			errs = append(errs, fmt.Errorf("job %q: listed twice", j.Name))
			continue
		}
		seen[j.Name] = true
		fn, ok := registry.Lookup(j.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("job %q: no Func is registered under this name; registered: %v", j.Name, registry.Names()))
			continue
		}
		if cfg.renewEvery > 0 && cfg.renewEvery > j.LeaseTTL/2 {
			errs = append(errs, fmt.Errorf("job %q: renew every %v is more than half its lease TTL %v", j.Name, cfg.renewEvery, j.LeaseTTL))
		}
		sched, _ := ParseSchedule(j.Schedule) // Validate parsed it
		s.jobs = append(s.jobs, &jobState{Job: j, sched: sched, fn: fn})
	}
	if len(cfg.jobs) == 0 {
		errs = append(errs, errors.New("no jobs: give the cron table with WithJobs"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	tel, err := newTelemetry(cfg, s.jobNames())
	if err != nil {
		return nil, fmt.Errorf("scheduler: telemetry: %w", err)
	}
	s.tel = tel
	return s, nil
}

// ReplicaID returns this replica's ID.
func (s *Scheduler) ReplicaID() string { return s.cfg.replica }

// Offset returns the last measured offset of Redis's clock from this
// replica's (positive: Redis is ahead), and whether one was measured yet.
func (s *Scheduler) Offset() (time.Duration, bool) {
	s.offsetMu.Lock()
	defer s.offsetMu.Unlock()
	return s.offset, s.measured
}

// Run runs the cron table until ctx ends. It blocks, and returns nil after a
// graceful stop, once every goroutine it started has exited: it stops
// claiming at once, lets running jobs go on for the shutdown grace, then
// cancels their contexts (cause ErrShutdown) and records their outcome.
// Redis being unreachable is not an error: the replica logs, retries and
// records what it could not do once Redis is back. Run may be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	r := newRunner(s)
	return r.run(ctx)
}

// jobNames returns the names of the table's jobs.
func (s *Scheduler) jobNames() []string {
	names := make([]string, len(s.jobs))
	for i, j := range s.jobs {
		names[i] = j.Name
	}
	return names
}

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
	"github.com/slotcron/slotcron/slot"
)

// Claimer is the slot protocol, as the scheduler uses it. *slotstore.Store
// satisfies it; a wrapper can add instrumentation or inject faults.
type Claimer interface {
	// Prepare readies the protocol (loads scripts); called once per Run.
	Prepare(ctx context.Context) error
	// Claim sends a batch of claims in one round trip.
	Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error)
	// Renew renews leases in one round trip; one error per lease.
	Renew(ctx context.Context, leases []slot.Lease) []error
	// Finish records runs' final states in one round trip; one error per run.
	Finish(ctx context.Context, reqs []slot.FinishRequest) []error
	// JobStates returns each job's latest recorded slot and running slots.
	JobStates(ctx context.Context, jobs []string) (map[string]slot.JobState, error)
	// Probe returns Redis's clock and the deployment's epoch.
	Probe(ctx context.Context) (slot.Probe, error)
	// Peek reads the records of the claims' slots (state and owner; a zero
	// Record for a slot with none), in one round trip, changing nothing.
	Peek(ctx context.Context, claims []slot.Claim) ([]slot.Record, error)
	// Missing returns the indexes of the slots that have no record,
	// changing nothing; cheaper than Peek when most have one.
	Missing(ctx context.Context, slots []slot.Ref) ([]int, error)
	// Running returns the slots each job's state lists running, changing
	// nothing (unlike JobStates, which reads in an older protocol's state).
	Running(ctx context.Context, jobs []string) (map[string]slot.JobState, error)
	// Heartbeat publishes this replica and returns the live replicas (and
	// other deployments); an error wrapping slot.ErrDuplicateReplica when
	// another live process has its ID.
	Heartbeat(ctx context.Context, me slot.Replica, stale time.Duration) (slot.Registry, error)
	// Registry reads the live replicas (seen within stale) without
	// publishing anything: what a Backfill or RunManual checks.
	Registry(ctx context.Context, stale time.Duration) (slot.Registry, error)
	// Leave removes this replica from the registry, when it stops.
	Leave(ctx context.Context, me slot.Replica) error
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

	// lostRuns holds the tokens of the runs whose record Redis lost, as
	// reported (runDataLoss): a few, only after a loss.
	lostRuns sync.Map
	offsetMu sync.Mutex
	offset   time.Duration // the last measured offset of Redis's clock from ours
	rtt      time.Duration // the last probe's round trip
	measured bool
	epoch    string // the deployment's epoch, as last probed
	// probedWall and probedMono are this replica's clock (wall reading) and
	// real time (monotonic) at the last probe, to notice a clock step.
	probedWall, probedMono time.Time

	probeNow chan struct{} // 1-buffered: "probe now", to the clock loop
	departed chan struct{} // 1-buffered: "a replica left the registry, or stopped being a candidate", to the loop

	triggers chan triggerReq // Trigger, to the loop
	looping  atomic.Bool     // the loop runs: Trigger hands it requests
	loopDone chan struct{}   // closed when the loop has returned

	table    slot.Replica // the table as the heartbeat publishes it (Jobs, Table, Names): set by New, read only
	instance string       // random per New: tells this process from another with its ID
	started0 time.Time    // when Run started
	peers    peerView
	catchups catchupView // what the heartbeat publishes of this replica's catch-up
}

// jobState is a job of the table, ready to run.
type jobState struct {
	Job
	sched   Schedule
	fn      jobs.Func
	idx     int         // its place in the table: the order of jobs due at one instant
	metrics *jobMetrics // its metric options (telemetry)
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
	s := &Scheduler{cfg: cfg, claimer: claimer, log: cfg.logger, probeNow: make(chan struct{}, 1), departed: make(chan struct{}, 1), instance: newTokenBase()[:12],
		triggers: make(chan triggerReq), loopDone: make(chan struct{})}
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
		if cfg.renewEvery > 0 {
			if err := CheckRenewEvery(cfg.renewEvery, j.LeaseTTL); err != nil {
				errs = append(errs, fmt.Errorf("job %q: renew every: %w", j.Name, err))
			}
		}
		sched, _ := ParseSchedule(j.Schedule) // Validate parsed it
		s.jobs = append(s.jobs, &jobState{Job: j, sched: sched, fn: wrap(fn, j), idx: len(s.jobs)})
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
	for _, j := range s.jobs {
		j.metrics = tel.metricsOf(j.Name)
	}
	s.table = tableOf(s.jobs)
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
// records what it could not do once Redis is back. Run returns an error
// wrapping slot.ErrDuplicateReplica, before it claims anything, when another
// live process uses its replica ID (it waits three heartbeats first, in case
// that process is its own crashed predecessor). Run may be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	s.started0 = s.cfg.clock.Now()
	r := newRunner(s)
	return r.run(ctx)
}

// wrap is how the scheduler runs a job's Func: a panic fails the run with its
// stack (jobs.Recover), and the job's timeout ends its context with cause
// jobs.ErrTimeout (jobs.Timeout).
func wrap(fn jobs.Func, j Job) jobs.Func {
	if j.Timeout > 0 {
		return jobs.Chain(jobs.Recover(), jobs.Timeout(j.Timeout))(fn)
	}
	return jobs.Recover()(fn)
}

// jobNames returns the names of the table's jobs.
func (s *Scheduler) jobNames() []string {
	names := make([]string, len(s.jobs))
	for i, j := range s.jobs {
		names[i] = j.Name
	}
	return names
}

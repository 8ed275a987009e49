package scheduler

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/slot"
)

// Attribute keys, shared by spans, metrics and logs.
const (
	attrJob     = attribute.Key("slotcron.job")
	attrSlot    = attribute.Key("slotcron.slot")
	attrReplica = attribute.Key("slotcron.replica")
	attrOutcome = attribute.Key("slotcron.outcome")
	attrHolder  = attribute.Key("slotcron.holder")
	attrFence   = attribute.Key("slotcron.fence")
	attrAttempt = attribute.Key("slotcron.attempt")
	attrRunID   = attribute.Key("slotcron.run_id")
	// a manual slot's ID and who asked for it
	attrManual   = attribute.Key("slotcron.manual_id")
	attrManualBy = attribute.Key("slotcron.manual_by")
)

const instrumentation = "github.com/slotcron/slotcron/scheduler"

// telemetry is the scheduler's spans and metrics. Every tick makes spans
// and metric points for every due job, so the hot paths build nothing a no-op
// provider would throw away: span attributes are set only on recording
// spans, and metric attribute sets are built once per job.
type telemetry struct {
	tracer    trace.Tracer
	prefix    string
	replica   string
	jobs      map[string]*jobMetrics // read-only after newTelemetry
	claims    metric.Int64Counter
	delay     metric.Float64Histogram
	duration  metric.Float64Histogram
	renewals  metric.Int64Counter
	losses    metric.Int64Counter
	offsetG   metric.Float64Gauge
	dataLoss  metric.Int64Counter
	disagreeG metric.Int64Gauge
	olderG    metric.Int64Gauge
	dupes     metric.Int64Counter
	unrepl    metric.Int64Counter
	recUnrepl metric.Int64Counter
	finishErr metric.Int64Counter
}

// jobMetrics are a job's metric options, each built once, when first used
// (as the slices the variadic Add and Record take, so that a call allocates
// nothing after the first). A replica uses few of a job's outcomes and
// states (won, or lost; done): building all of them for every job took
// about 3.7 KB a job, 36 MB for a table of 10,000. They are looked up by
// index, not in a map: at 10,000 jobs a tick every due slot counts an
// outcome on every replica, and a sync.Map per job cost a cache miss each.
type jobMetrics struct {
	job       string
	jobAdd    []metric.AddOption                                     // {job}
	jobRecord []metric.RecordOption                                  // {job}
	outcomes  [len(outcomeNames)]atomic.Pointer[[]metric.AddOption]  // {job, outcome}
	states    [len(stateNames)]atomic.Pointer[[]metric.RecordOption] // {job, state}
	other     sync.Map                                               // an outcome or state outside those: none is
}

// outcomeNames are the outcomes a claim is counted with: the store's, and
// the scheduler's own.
var outcomeNames = [...]string{
	string(slot.OutcomeWon), string(slot.OutcomeLost), string(slot.OutcomeSkipped), string(slot.OutcomeBusy),
	string(slot.OutcomeMissed), string(slot.OutcomeAlive), string(slot.OutcomeAbandoned), string(slot.OutcomeClosed),
	string(slot.OutcomeGone), string(slot.OutcomeEarly), string(slot.OutcomePaused),
	outcomeError, outcomeRefused, outcomeRefusedProtocol,
}

// stateNames are the states a run is counted with (slot.RunStates).
var stateNames = [...]string{string(slot.StateDone), string(slot.StateFailed), string(slot.StateAbandoned)}

var outcomeIndex, stateIndex = func() (map[string]int, map[string]int) {
	o, st := map[string]int{}, map[string]int{}
	for i, name := range outcomeNames {
		o[name] = i
	}
	for i, state := range stateNames {
		st[state] = i
	}
	return o, st
}()

func newJobMetrics(job string) *jobMetrics {
	byJob := metric.WithAttributeSet(attribute.NewSet(attribute.String("job", job)))
	return &jobMetrics{job: job, jobAdd: []metric.AddOption{byJob}, jobRecord: []metric.RecordOption{byJob}}
}

func outcomeSet(job, outcome string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("job", job), attribute.String("outcome", outcome)))
}

func stateSet(job, state string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("job", job), attribute.String("state", state)))
}

// metricsOf returns job's metric options; a job outside the table (none is)
// gets them built on the spot.
func (t *telemetry) metricsOf(job string) *jobMetrics {
	if m, ok := t.jobs[job]; ok {
		return m
	}
	return newJobMetrics(job)
}

func (m *jobMetrics) outcome(outcome string) []metric.AddOption {
	i, ok := outcomeIndex[outcome]
	if !ok {
		o, _ := m.other.LoadOrStore("outcome "+outcome, []metric.AddOption{outcomeSet(m.job, outcome)})
		return o.([]metric.AddOption)
	}
	if o := m.outcomes[i].Load(); o != nil {
		return *o
	}
	o := []metric.AddOption{outcomeSet(m.job, outcome)}
	m.outcomes[i].CompareAndSwap(nil, &o)
	return *m.outcomes[i].Load()
}

func (m *jobMetrics) state(state string) []metric.RecordOption {
	i, ok := stateIndex[state]
	if !ok {
		o, _ := m.other.LoadOrStore("state "+state, []metric.RecordOption{stateSet(m.job, state)})
		return o.([]metric.RecordOption)
	}
	if o := m.states[i].Load(); o != nil {
		return *o
	}
	o := []metric.RecordOption{stateSet(m.job, state)}
	m.states[i].CompareAndSwap(nil, &o)
	return *m.states[i].Load()
}

func newTelemetry(cfg config, jobs []string) (*telemetry, error) {
	m := cfg.meterProvider.Meter(instrumentation)
	t := &telemetry{tracer: cfg.tracerProvider.Tracer(instrumentation), prefix: cfg.keyPrefix, replica: cfg.replica,
		jobs: make(map[string]*jobMetrics, len(jobs))}
	for _, job := range jobs {
		t.jobs[job] = newJobMetrics(job)
	}
	var err error
	if t.claims, err = m.Int64Counter("slotcron.claims",
		metric.WithDescription("Claims sent, by job and outcome ("+strings.Join(outcomeNames[:], ", ")+").")); err != nil {
		return nil, err
	}
	if t.delay, err = m.Float64Histogram("slotcron.dispatch_delay", metric.WithUnit("s"),
		metric.WithDescription("From a slot's scheduled time to its job's start on the winner."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return nil, err
	}
	if t.duration, err = m.Float64Histogram("slotcron.job_duration", metric.WithUnit("s"),
		metric.WithDescription("How long runs took, by job and final state."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if t.renewals, err = m.Int64Counter("slotcron.lease_renewals",
		metric.WithDescription("Lease renewals, by result (renewed, lost, failed).")); err != nil {
		return nil, err
	}
	if t.losses, err = m.Int64Counter("slotcron.lease_lost",
		metric.WithDescription("Leases lost mid-run, by job.")); err != nil {
		return nil, err
	}
	if t.dataLoss, err = m.Int64Counter("slotcron.redis_data_loss",
		metric.WithDescription("Times this replica found that Redis lost data it had written: a changed epoch, or a running slot's record gone.")); err != nil {
		return nil, err
	}
	if t.disagreeG, err = m.Int64Gauge("slotcron.replica_disagreements",
		metric.WithDescription("Jobs (or replica settings, such as max_skew) on which this replica and a live peer (or another key prefix on the same Redis) disagree, at the last heartbeat.")); err != nil {
		return nil, err
	}
	if t.olderG, err = m.Int64Gauge("slotcron.replicas_older_protocol",
		metric.WithDescription("Live replicas of an older slot protocol, at the last heartbeat: while there is one, this replica claims nothing.")); err != nil {
		return nil, err
	}
	if t.dupes, err = m.Int64Counter("slotcron.duplicate_replica_id",
		metric.WithDescription("Heartbeats that found another live process with this replica's ID.")); err != nil {
		return nil, err
	}
	if t.unrepl, err = m.Int64Counter("slotcron.claims_unreplicated",
		metric.WithDescription("Won claims that fewer replicas acknowledged than wait_replicas asks, by job.")); err != nil {
		return nil, err
	}
	if t.recUnrepl, err = m.Int64Counter("slotcron.records_unreplicated",
		metric.WithDescription("Finished runs whose final record fewer replicas acknowledged than wait_replicas asks, by job.")); err != nil {
		return nil, err
	}
	if t.finishErr, err = m.Int64Counter("slotcron.finish_errors",
		metric.WithDescription("Failed tries to record a finished run's outcome, by job: the run tries again until Redis answers, its slot running meanwhile.")); err != nil {
		return nil, err
	}
	if t.offsetG, err = m.Float64Gauge("slotcron.clock_offset", metric.WithUnit("s"),
		metric.WithDescription("Redis's clock minus this replica's, at the last measurement.")); err != nil {
		return nil, err
	}
	return t, nil
}

// Metric labels are short (job, outcome, state, result), as Prometheus users
// write them; spans and logs use the slotcron. prefix.
func (t *telemetry) claimed(m *jobMetrics, outcome string) {
	t.claims.Add(context.Background(), 1, m.outcome(outcome)...)
}

func (t *telemetry) dispatched(m *jobMetrics, delay time.Duration) {
	t.delay.Record(context.Background(), delay.Seconds(), m.jobRecord...)
}

func (t *telemetry) ran(m *jobMetrics, state string, took time.Duration) {
	t.duration.Record(context.Background(), took.Seconds(), m.state(state)...)
}

// renewal counts a renewal by result: renewed, lost or failed.
func (t *telemetry) renewal(result string) {
	t.renewals.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

// lost counts a lease lost mid-run.
func (t *telemetry) lost(job string) {
	t.losses.Add(context.Background(), 1, t.metricsOf(job).jobAdd...)
}

// disagree records how many (job, peer) disagreements the last heartbeat
// found, replica settings included (Disagreement's Job "").
func (t *telemetry) disagree(n int) { t.disagreeG.Record(context.Background(), int64(n)) }

func (t *telemetry) olderProtocol(n int) { t.olderG.Record(context.Background(), int64(n)) }

// duplicate counts a heartbeat that found this replica's ID in use elsewhere.
func (t *telemetry) duplicate() { t.dupes.Add(context.Background(), 1) }

// unreplicated counts a won claim that its replicas did not acknowledge in time.
func (t *telemetry) unreplicated(job string) {
	t.unrepl.Add(context.Background(), 1, t.metricsOf(job).jobAdd...)
}

// recordUnreplicated counts a finished run whose final record its replicas
// did not acknowledge in time.
func (t *telemetry) recordUnreplicated(job string) {
	t.recUnrepl.Add(context.Background(), 1, t.metricsOf(job).jobAdd...)
}

// finishFailed counts a try to record a run's outcome that failed.
func (t *telemetry) finishFailed(m *jobMetrics) {
	t.finishErr.Add(context.Background(), 1, m.jobAdd...)
}

// dataLost counts a data loss this replica found.
func (t *telemetry) dataLost() { t.dataLoss.Add(context.Background(), 1) }

func (t *telemetry) offset(d time.Duration) {
	t.offsetG.Record(context.Background(), d.Seconds())
}

// durationBuckets are slotcron.job_duration's bucket bounds, in seconds,
// from 1ms to 1h: OTel's defaults (0, 5, 10, 25, ... 10000) are meant for
// milliseconds, and would put every sub-second run in one bucket.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

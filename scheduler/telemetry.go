package scheduler

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/locking"
)

// Outcomes of a slot span besides the claim outcomes of locking.
const (
	outcomeError       = "error"
	outcomeRefusedSkew = "refused_skew"
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
)

const instrumentation = "github.com/slotcron/slotcron/scheduler"

// telemetry is the scheduler's spans and metrics. Every tick makes spans
// and metric points for every due job, so the hot paths build nothing a no-op
// provider would throw away: span attributes are set only on recording
// spans, and metric attribute sets are built once per job.
type telemetry struct {
	tracer   trace.Tracer
	prefix   string
	replica  string
	jobs     map[string]*jobMetrics // read-only after newTelemetry
	claims   metric.Int64Counter
	delay    metric.Float64Histogram
	duration metric.Float64Histogram
	renewals metric.Int64Counter
	losses   metric.Int64Counter
	offsetG  metric.Float64Gauge
}

// jobMetrics are a job's metric options, built once (as the slices the
// variadic Add and Record take, so that a call allocates nothing).
type jobMetrics struct {
	jobAdd    []metric.AddOption               // {job}
	jobRecord []metric.RecordOption            // {job}
	outcomes  map[string][]metric.AddOption    // {job, outcome}
	states    map[string][]metric.RecordOption // {job, state}
}

// Every outcome and final state the scheduler records, for jobMetrics.
var (
	metricOutcomes = []string{string(locking.OutcomeWon), string(locking.OutcomeLost), string(locking.OutcomeSkipped),
		string(locking.OutcomeBusy), string(locking.OutcomeMissed), string(locking.OutcomeAlive),
		string(locking.OutcomeAbandoned), string(locking.OutcomeClosed), string(locking.OutcomeGone), outcomeError}
	metricStates = []string{string(locking.StateDone), string(locking.StateFailed), string(locking.StateAbandoned)}
)

func newJobMetrics(job string) *jobMetrics {
	byJob := metric.WithAttributeSet(attribute.NewSet(attribute.String("job", job)))
	m := &jobMetrics{
		jobAdd:    []metric.AddOption{byJob},
		jobRecord: []metric.RecordOption{byJob},
		outcomes:  make(map[string][]metric.AddOption, len(metricOutcomes)),
		states:    make(map[string][]metric.RecordOption, len(metricStates)),
	}
	for _, o := range metricOutcomes {
		m.outcomes[o] = []metric.AddOption{outcomeSet(job, o)}
	}
	for _, st := range metricStates {
		m.states[st] = []metric.RecordOption{stateSet(job, st)}
	}
	return m
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

func (m *jobMetrics) outcome(job, outcome string) []metric.AddOption {
	if o, ok := m.outcomes[outcome]; ok {
		return o
	}
	return []metric.AddOption{outcomeSet(job, outcome)}
}

func (m *jobMetrics) state(job, state string) []metric.RecordOption {
	if o, ok := m.states[state]; ok {
		return o
	}
	return []metric.RecordOption{stateSet(job, state)}
}

// Span start options, built once.
var (
	noSpan          = trace.SpanFromContext(context.Background()) // a no-op span
	slotSpanStart   = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal)}
	clientSpanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

func newTelemetry(cfg config, jobs []string) (*telemetry, error) {
	m := cfg.meterProvider.Meter(instrumentation)
	t := &telemetry{tracer: cfg.tracerProvider.Tracer(instrumentation), prefix: cfg.keyPrefix, replica: cfg.replica,
		jobs: make(map[string]*jobMetrics, len(jobs))}
	for _, job := range jobs {
		t.jobs[job] = newJobMetrics(job)
	}
	var err error
	if t.claims, err = m.Int64Counter("slotcron.claims",
		metric.WithDescription("Claims sent, by job and outcome (won, lost, skipped, busy, missed, alive, abandoned, closed, gone, error).")); err != nil {
		return nil, err
	}
	if t.delay, err = m.Float64Histogram("slotcron.dispatch_delay", metric.WithUnit("s"),
		metric.WithDescription("From a slot's scheduled time to its job's start on the winner."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return nil, err
	}
	if t.duration, err = m.Float64Histogram("slotcron.job_duration", metric.WithUnit("s"),
		metric.WithDescription("How long runs took, by job and final state.")); err != nil {
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
	if t.offsetG, err = m.Float64Gauge("slotcron.clock_offset", metric.WithUnit("s"),
		metric.WithDescription("Redis's clock minus this replica's, at the last measurement.")); err != nil {
		return nil, err
	}
	return t, nil
}

// startSlot starts this replica's root span for a slot, in the slot's trace:
// "slot" for a claim, "slot.watch" for a check on a running slot whose owner
// may be gone.
func (t *telemetry) startSlot(ctx context.Context, name, job string, slot time.Time) (context.Context, trace.Span) {
	ctx = context.WithValue(ctx, slotTraceKey{}, slotRef{t.prefix, job, slot})
	ctx, span := t.tracer.Start(ctx, name, slotSpanStart...)
	if span.IsRecording() {
		span.SetAttributes(attrJob.String(job), attrSlot.String(slot.UTC().Format(time.RFC3339)), attrReplica.String(t.replica))
	}
	return ctx, span
}

// startSlots starts the slot spans of a batch, as startSlot does. When the
// first one has no trace ID, no SDK is installed (the global provider's
// default, or a no-op provider), so every span would be a no-op: the others
// are not started, and their contexts are ctx.
func (t *telemetry) startSlots(ctx context.Context, n int, slot func(i int) (name, job string, at time.Time)) ([]context.Context, []trace.Span) {
	ctxs, spans := make([]context.Context, n), make([]trace.Span, n)
	for i := range n {
		if i > 0 && !spans[0].SpanContext().IsValid() {
			ctxs[i], spans[i] = ctx, noSpan
			continue
		}
		name, job, at := slot(i)
		ctxs[i], spans[i] = t.startSlot(ctx, name, job, at)
	}
	return ctxs, spans
}

func (t *telemetry) endSlot(span trace.Span, job, outcome, holder string, fence int64, attempt int, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrOutcome.String(outcome))
	if holder != "" {
		span.SetAttributes(attrHolder.String(holder))
	}
	if fence > 0 {
		span.SetAttributes(attrFence.Int64(fence))
	}
	if attempt > 0 {
		span.SetAttributes(attrAttempt.Int(attempt))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// startClaims starts a lock.claim span under each slot span; one round trip
// serves them all.
func (t *telemetry) startClaims(ctxs []context.Context) []trace.Span {
	spans := make([]trace.Span, len(ctxs))
	for i, ctx := range ctxs {
		if !trace.SpanFromContext(ctx).IsRecording() { // a dropped slot drops its claim
			spans[i] = noSpan
			continue
		}
		_, spans[i] = t.tracer.Start(ctx, "lock.claim", clientSpanStart...)
		if spans[i].IsRecording() {
			spans[i].SetAttributes(attribute.Int("slotcron.batch", len(ctxs)))
		}
	}
	return spans
}

func (t *telemetry) endClaims(spans []trace.Span, results []locking.ClaimResult, err error) {
	for i, span := range spans {
		switch {
		case !span.IsRecording():
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case results[i].Err != nil:
			span.RecordError(results[i].Err)
			span.SetStatus(codes.Error, results[i].Err.Error())
		default:
			span.SetAttributes(attrOutcome.String(string(results[i].Outcome)))
			if results[i].Holder != "" {
				span.SetAttributes(attrHolder.String(results[i].Holder))
			}
		}
		span.End()
	}
}

// Metric labels are short (job, outcome, state, result), as Prometheus users
// write them; spans and logs use the slotcron. prefix.
func (t *telemetry) claimed(job, outcome string) {
	t.claims.Add(context.Background(), 1, t.metricsOf(job).outcome(job, outcome)...)
}

func (t *telemetry) dispatched(job string, delay time.Duration) {
	t.delay.Record(context.Background(), delay.Seconds(), t.metricsOf(job).jobRecord...)
}

func (t *telemetry) ran(job, state string, took time.Duration) {
	t.duration.Record(context.Background(), took.Seconds(), t.metricsOf(job).state(job, state)...)
}

func (t *telemetry) startRun(sctx context.Context) (context.Context, trace.Span) {
	return t.tracer.Start(sctx, "job.run")
}

func (t *telemetry) endRun(span trace.Span, lease *locking.SlotLease, err error, text string) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrFence.Int64(lease.Fence()), attrAttempt.Int(lease.Attempt()))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, text)
	}
	span.End()
}

func (t *telemetry) startFinish(ctx context.Context) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() { // a dropped slot drops its finish
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, "lock.finish", clientSpanStart...)
}

func (t *telemetry) endFinish(span trace.Span, state locking.SlotState, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.String("slotcron.state", string(state)))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// renewal counts a renewal by result: renewed, lost or failed.
func (t *telemetry) renewal(result string) {
	t.renewals.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

// renewed counts a renewal; the run span gets a lease.renewed event on the
// 1st, 2nd, 4th, 8th... renewal, so a long run's span stays small.
func (t *telemetry) renewed(ctx context.Context, l *locking.SlotLease, n int) {
	t.renewal("renewed")
	if n&(n-1) == 0 {
		trace.SpanFromContext(ctx).AddEvent("lease.renewed", trace.WithAttributes(
			attribute.Int("slotcron.renewal", n), attribute.String("slotcron.valid_until", l.Deadline().Format(time.RFC3339Nano))))
	}
}

// lost counts a lease lost mid-run and marks the run span.
func (t *telemetry) lost(ctx context.Context, l *locking.SlotLease, cause error) {
	t.losses.Add(context.Background(), 1, t.metricsOf(l.Job()).jobAdd...)
	trace.SpanFromContext(ctx).AddEvent("lease.lost", trace.WithAttributes(attribute.String("slotcron.cause", cause.Error())))
}

func (t *telemetry) offset(d time.Duration) {
	t.offsetG.Record(context.Background(), d.Seconds())
}

// slotTraceKey carries a slotRef to the IDGenerator, which derives the trace
// ID only when an SDK asks for one.
type slotTraceKey struct{}

type slotRef struct {
	prefix, job string
	slot        time.Time
}

// SlotTraceID is the trace ID of a slot: the first 16 bytes of
// SHA-256(prefix + "/" + job + "/" + unix seconds). Every replica derives the
// same one, so their spans for the slot share a trace, and a user can find a
// slot's trace from its job and time alone.
func SlotTraceID(prefix, job string, slot time.Time) trace.TraceID {
	sum := sha256.Sum256([]byte(prefix + "/" + job + "/" + strconv.FormatInt(slot.Unix(), 10)))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// IDGenerator gives the scheduler's slot spans their slot's trace ID and
// every other span random IDs. Install it in the OpenTelemetry SDK:
//
//	sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(scheduler.NewIDGenerator()), ...)
//
// With sdktrace.TraceIDRatioBased sampling, every replica then keeps or drops
// the same slots, so a sampled slot's trace is complete. It satisfies the
// SDK's IDGenerator interface without importing the SDK.
type IDGenerator struct{}

// NewIDGenerator returns the IDGenerator.
func NewIDGenerator() *IDGenerator { return &IDGenerator{} }

// NewIDs returns the slot's trace ID for a slot span, random IDs otherwise.
func (g *IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if ref, ok := ctx.Value(slotTraceKey{}).(slotRef); ok {
		id := SlotTraceID(ref.prefix, ref.job, ref.slot)
		return id, g.NewSpanID(ctx, id)
	}
	var id trace.TraceID
	for !id.IsValid() {
		putUint64(id[:8], rand.Uint64())
		putUint64(id[8:], rand.Uint64())
	}
	return id, g.NewSpanID(ctx, id)
}

// NewSpanID returns a random span ID.
func (g *IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		putUint64(id[:], rand.Uint64())
	}
	return id
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

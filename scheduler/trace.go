package scheduler

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/slot"
)

// Span start options, built once.
var (
	noSpan          = trace.SpanFromContext(context.Background()) // a no-op span
	slotSpanStart   = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal)}
	clientSpanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// The kinds of a slot's root span. It starts named after its kind and ends
// named "<kind> <outcome>" (rootName): "slot won", "slot lost",
// "slot.watch alive". Jaeger's timeline shows a span's service and name on
// its row, so each replica's row reads what happened to it without expanding
// the span. Which replica it is, and who holds the slot, stay attributes
// (slotcron.replica, slotcron.holder): OpenTelemetry asks for span names of
// low cardinality, and replica IDs are not (hostname-pid by default).
const (
	kindSlot     = "slot"          // a scheduled slot: live, catch-up or expire claims
	kindWatch    = "slot.watch"    // a check on a running slot whose owner may be gone
	kindManual   = "slot.manual"   // a manual slot (Trigger, RunManual)
	kindBackfill = "slot.backfill" // a slot that Backfill claims
)

// outcomeUnknown names a root span whose outcome this version does not know;
// its slotcron.outcome attribute still holds the outcome.
const outcomeUnknown = "unknown"

// rootName is the name a root span of kind ends with: kind and outcome, from
// a fixed set of names, whatever the store answers.
func rootName(kind, outcome string) string {
	if _, known := outcomeIndex[outcome]; !known {
		outcome = outcomeUnknown
	}
	return kind + " " + outcome
}

// slotTrace is this replica's telemetry of one slot, carried from its claim
// to its end: the root span (one of the kinds above, renamed with the outcome
// at its end), the lock.claim span of its claim and, for a won slot, the
// job.run and lock.finish spans. end is the only way to close it, and it ends
// every span that is still open, so no branch can leak one.
type slotTrace struct {
	tel   *telemetry
	job   string
	kind  string          // the root span's kind
	ctx   context.Context // carries the root span: the parent of every other
	span  trace.Span
	claim trace.Span // lock.claim until the answer; nil before and after
	run   trace.Span // job.run while the job runs; nil before and after
	// runCtx carries job.run: the job's spans, and the lease events, go under it.
	runCtx context.Context
}

// ending is how a slot ends on this replica: the attributes of its root span.
type ending struct {
	outcome string
	holder  string // the replica that holds or held the slot
	fence   int64
	attempt int
	err     error
}

// beginSlots starts the traces of a batch of claims. When the first root span
// has no trace ID, no SDK is installed (the global provider's default, or a
// no-op provider), so every span would be a no-op: the others share a trace
// that starts no span at all.
func (t *telemetry) beginSlots(ctx context.Context, n int, at func(i int) (kind string, c slot.Claim)) []*slotTrace {
	out := make([]*slotTrace, n)
	for i := range n {
		kind, c := at(i)
		if i > 0 && !out[0].span.SpanContext().IsValid() {
			out[i] = &slotTrace{tel: t, job: c.Job, kind: kind, ctx: ctx, span: noSpan}
			continue
		}
		out[i] = t.beginSlot(ctx, kind, c)
	}
	return out
}

// beginSlot starts the trace of c's slot, in the slot's own trace ID (see
// IDGenerator), with a root span of kind.
func (t *telemetry) beginSlot(ctx context.Context, kind string, c slot.Claim) *slotTrace {
	return t.beginSlotAt(ctx, kind, c, time.Time{})
}

// beginSlotAt is beginSlot with the root span starting at start (zero: now).
func (t *telemetry) beginSlotAt(ctx context.Context, kind string, c slot.Claim, start time.Time) *slotTrace {
	ref := slotRef{prefix: t.prefix, job: c.Job, slot: c.Slot}
	if c.Manual != nil {
		ref.manual = c.Manual.ID
	}
	ctx = context.WithValue(ctx, slotTraceKey{}, ref)
	opts := slotSpanStart
	if !start.IsZero() {
		opts = append(slices.Clip(opts), trace.WithTimestamp(start))
	}
	ctx, span := t.tracer.Start(ctx, kind, opts...)
	if span.IsRecording() {
		span.SetAttributes(attrJob.String(c.Job), attrSlot.String(c.Slot.UTC().Format(time.RFC3339)), attrReplica.String(t.replica))
		if c.Manual != nil {
			span.SetAttributes(attrManual.String(c.Manual.ID))
			if c.Manual.By != "" {
				span.SetAttributes(attrManualBy.String(c.Manual.By))
			}
		}
	}
	return &slotTrace{tel: t, job: c.Job, kind: kind, ctx: ctx, span: span}
}

// claiming starts the lock.claim span of each trace: one round trip serves
// them all.
func claiming(sts []*slotTrace) {
	for _, st := range sts {
		if !st.span.IsRecording() { // a dropped slot drops its claim
			continue
		}
		_, st.claim = st.tel.tracer.Start(st.ctx, "lock.claim", clientSpanStart...)
		if st.claim.IsRecording() {
			st.claim.SetAttributes(attribute.Int("slotcron.batch", len(sts)))
		}
	}
}

// answered ends the lock.claim span with the claim's result, or with err when
// the whole batch failed.
func (st *slotTrace) answered(res slot.Result, err error) {
	span := st.claim
	st.claim = nil
	switch {
	case span == nil:
		return
	case !span.IsRecording():
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case res.Err != nil:
		span.RecordError(res.Err)
		span.SetStatus(codes.Error, res.Err.Error())
	case res.Outcome != "":
		span.SetAttributes(attrOutcome.String(string(res.Outcome)))
		if res.Holder != "" {
			span.SetAttributes(attrHolder.String(res.Holder))
		}
	}
	span.End()
}

// manualRun sets the root span's slot, and who asked, from a manual slot's
// lease: its record's, which the claim, made before Redis answered (or a
// takeover's), does not know.
func (st *slotTrace) manualRun(l slot.Lease) {
	m := l.Manual()
	if m == nil || !st.span.IsRecording() {
		return
	}
	st.slotIs(l.Slot())
	st.span.SetAttributes(attrManual.String(m.ID))
	if m.By != "" {
		st.span.SetAttributes(attrManualBy.String(m.By))
	}
}

// slotIs names the slot's time on its root span once Redis has said it: a
// manual slot's claim is sent with the replica's own time.
func (st *slotTrace) slotIs(at time.Time) {
	if st.span.IsRecording() {
		st.span.SetAttributes(attrSlot.String(at.UTC().Format(time.RFC3339)))
	}
}

// startRun starts the job.run span and returns its context.
func (st *slotTrace) startRun() context.Context {
	st.runCtx, st.run = st.tel.tracer.Start(st.ctx, "job.run")
	return st.runCtx
}

// runDone ends the job.run span: how the run went, under which lease.
func (st *slotTrace) runDone(lease slot.Lease, err error, text string) {
	span := st.run
	st.run = nil
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attrFence.Int64(lease.Fence()), attrAttempt.Int(lease.Attempt()), attrRunID.String(lease.RunID()))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, text)
		}
	}
	span.End()
}

// finishing runs record, which records the run's final state, in a
// lock.finish span beside job.run.
func (st *slotTrace) finishing(state slot.State, record func() error) error {
	if !st.span.IsRecording() { // a dropped slot drops its finish
		return record()
	}
	_, span := st.tel.tracer.Start(st.ctx, "lock.finish", clientSpanStart...)
	err := record()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("slotcron.state", string(state)))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	return err
}

// renewed marks a confirmed renewal on job.run: the 1st, 2nd, 4th, 8th...,
// so that a long run's span stays small.
func (st *slotTrace) renewed(lease slot.Lease, n int) {
	if n&(n-1) == 0 {
		trace.SpanFromContext(st.runCtx).AddEvent("lease.renewed", trace.WithAttributes(
			attribute.Int("slotcron.renewal", n), attribute.String("slotcron.valid_until", lease.Deadline().Format(time.RFC3339Nano))))
	}
}

// jobStarted marks, on job.run, when the job was called: job.run begins
// when the slot is won, which may be ahead of the slot's time (the run waits
// for it).
func (st *slotTrace) jobStarted(delay time.Duration) {
	trace.SpanFromContext(st.runCtx).AddEvent("job.started", trace.WithAttributes(
		attribute.Float64("slotcron.dispatch_delay_ms", float64(delay)/float64(time.Millisecond))))
}

// renewFailed marks a renewal that got no answer on job.run.
func (st *slotTrace) renewFailed(err error) {
	trace.SpanFromContext(st.runCtx).AddEvent("lease.renew_failed", trace.WithAttributes(attribute.String("error", err.Error())))
}

// lost marks a lease lost mid-run on job.run.
func (st *slotTrace) lost(cause error) {
	trace.SpanFromContext(st.runCtx).AddEvent("lease.lost", trace.WithAttributes(attribute.String("slotcron.cause", cause.Error())))
}

// end ends the trace: any span still open, then the root span with e, named
// after its kind and e's outcome.
func (st *slotTrace) end(e ending) {
	if st.claim != nil {
		st.answered(slot.Result{Err: e.err}, nil)
	}
	if st.run != nil {
		st.run.End()
		st.run = nil
	}
	span := st.span
	st.span = noSpan
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetName(rootName(st.kind, e.outcome))
	span.SetAttributes(attrOutcome.String(e.outcome))
	if e.holder != "" {
		span.SetAttributes(attrHolder.String(e.holder))
	}
	if e.fence > 0 {
		span.SetAttributes(attrFence.Int64(e.fence))
	}
	if e.attempt > 0 {
		span.SetAttributes(attrAttempt.Int(e.attempt))
	}
	if e.err != nil {
		span.RecordError(e.err)
		span.SetStatus(codes.Error, e.err.Error())
	}
	span.End()
}

// peeked starts the trace of a hedged claim or a check (kind) that a read of
// its slot's record (Peek, from start to done) answered with res: its root
// span, with a lock.peek child where a claim would have lock.claim. The
// caller ends it. quiet says that no SDK is installed (an earlier trace of
// the batch started a span with no trace ID, as beginSlots tells): then the
// trace starts no span at all, which spares a hedged loss the root span's
// context and options, most of what it costs a replica with no tracing.
func (t *telemetry) peeked(ctx context.Context, kind string, c slot.Claim, res slot.Result, start, done time.Time, quiet bool) *slotTrace {
	if quiet {
		return &slotTrace{tel: t, job: c.Job, kind: kind, ctx: ctx, span: noSpan}
	}
	st := t.beginSlotAt(ctx, kind, c, start)
	if st.span.IsRecording() {
		_, peek := t.tracer.Start(st.ctx, "lock.peek", append(clientSpanStart, trace.WithTimestamp(start))...)
		peek.SetAttributes(attrOutcome.String(string(res.Outcome)), attrHolder.String(res.Holder))
		peek.End(trace.WithTimestamp(done))
	}
	return st
}

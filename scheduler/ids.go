package scheduler

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/slot"
)

// slotTraceKey carries a slotRef to the IDGenerator, which derives the trace
// ID only when an SDK asks for one.
type slotTraceKey struct{}

type slotRef struct {
	prefix, job string
	slot        time.Time
	manual      string // a manual slot's ID: its trace ID derives from it
}

// SlotTraceID is the trace ID of a slot: the first 16 bytes of
// SHA-256(prefix + "/" + job + "/" + unix seconds). Every replica derives the
// same one, so their spans for the slot share a trace, and a user can find a
// slot's trace from its job and time alone.
func SlotTraceID(prefix, job string, at time.Time) trace.TraceID {
	sum := sha256.Sum256([]byte(prefix + "/" + job + "/" + strconv.FormatInt(at.Unix(), 10)))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// ManualTraceID is the trace ID of a manual slot: as SlotTraceID, over
// prefix + "/" + job + "/m:" + its ID.
func ManualTraceID(prefix, job, id string) trace.TraceID {
	sum := sha256.Sum256([]byte(prefix + "/" + job + "/m:" + id))
	var tid trace.TraceID
	copy(tid[:], sum[:16])
	return tid
}

// RecordTraceID is the trace ID of the slot a record is of: SlotTraceID, or
// ManualTraceID for a manual slot's record.
func RecordTraceID(prefix string, rec slot.Record) trace.TraceID {
	if rec.Manual != nil {
		return ManualTraceID(prefix, rec.Job, rec.Manual.ID)
	}
	return SlotTraceID(prefix, rec.Job, rec.Slot)
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
		if ref.manual != "" {
			id = ManualTraceID(ref.prefix, ref.job, ref.manual)
		}
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

package slot

import (
	"context"
	"time"
)

// Lease is a won slot: the run's token, fence and attempt, and the proof of
// ownership that the store's Renew keeps alive.
//
// A lease can be lost at any moment: its owner can pause past the TTL, Redis
// can fail over, another replica can take the slot over. Context is cancelled
// as soon as ownership can no longer be proven, with a cause wrapping
// ErrLeaseLost; after Finish it is cancelled with a nil cause.
type Lease interface {
	Job() string
	// Slot is the slot's time: a manual slot's is its record's (when it
	// was first claimed, on the store's clock), for every attempt.
	Slot() time.Time
	// Manual is a manual slot's ID, who asked and their note, as its
	// record has them; nil for a scheduled slot.
	Manual() *Manual
	Replica() string
	Token() string
	// RunID names the run (the claim's RunID): a UUIDv7, public.
	RunID() string
	Fence() int64
	Attempt() int
	// TTL is the lease TTL that renewals restore.
	TTL() time.Duration
	// Context is cancelled when the lease ends.
	Context() context.Context
	// Deadline is the local time until which ownership is proven.
	Deadline() time.Time
	// Proven reports whether ownership is proven now. Once Deadline has
	// passed, it ends the lease (Context is cancelled, with ErrLeaseLost)
	// before it returns, rather than leave that to the lease's timer.
	Proven() bool
}

package slot

import (
	"errors"
	"time"

	"github.com/slotcron/slotcron/internal/validity"
)

var (
	// ErrLeaseLost is the cause of a Lease context's cancellation when
	// ownership can no longer be proven. It is the same value as
	// locking.ErrLeaseLost: test either with errors.Is.
	ErrLeaseLost = validity.ErrLeaseLost

	// ErrNotHeld means the record is no longer the run's (taken over, or
	// recorded abandoned by another replica): a finish changed nothing.
	ErrNotHeld = errors.New("slot: not held")

	// ErrDataLoss means the store lost data it had acknowledged: a slot's
	// record vanished under its running owner (Redis restarted without
	// persistence, or failed over to a replica that had not received it). A
	// lease lost this way has a cause that wraps both ErrLeaseLost and
	// ErrDataLoss.
	ErrDataLoss = errors.New("slot: the store lost data")

	// ErrUnreplicated means a write took effect, but fewer replicas
	// acknowledged it in time than the store was asked to wait for: a
	// failover now could lose it.
	ErrUnreplicated = errors.New("slot: fewer replicas acknowledged the write than asked")

	// ErrPastRetention means the store refused a catch-up claim that has a
	// MaxEarly, recording nothing: on the store's clock its slot is older
	// than the claim's Retention less its MaxEarly, so the slot's record
	// may have expired, and a slot that ran would run again.
	ErrPastRetention = errors.New("slot: past the retention that keeps its record")
)

// MinLeaseTTL is the shortest lease a slot may have: renewals every TTL/3
// must fit in it, with room for a round trip. The scheduler and the worker's
// config both check it.
const MinLeaseTTL = 100 * time.Millisecond

// DefaultKeyPrefix names a deployment when nothing else does: the first part
// of every key, and of every slot's trace ID.
const DefaultKeyPrefix = "slotcron"

package locking

import (
	"errors"

	"github.com/slotcron/slotcron/internal/validity"
)

var (
	// ErrNotObtained means another owner holds the key. Obtain returns it; it is
	// an outcome of a race, not a failure of Redis.
	ErrNotObtained = errors.New("locking: not obtained")

	// ErrNotHeld means the caller's token no longer owns the key: it expired,
	// was released, or was taken by another owner. Extend, TTL and Release
	// return it.
	ErrNotHeld = errors.New("locking: not held")

	// ErrLeaseLost is the cause of a lease context's cancellation when ownership
	// can no longer be proven: the token check failed, or the TTL ran out while
	// renewals kept failing. Test for it with errors.Is(context.Cause(ctx), ErrLeaseLost);
	// the cause wraps it with the reason. It is the same value as
	// slot.ErrLeaseLost, the cause of a scheduled run's lost lease.
	ErrLeaseLost = validity.ErrLeaseLost

	// ErrInvalidKey means a key can't be used as asked, for instance a key that
	// has no hash tag and contains '}', so keys derived from it could not share
	// its Redis Cluster slot.
	ErrInvalidKey = errors.New("locking: invalid key")
)

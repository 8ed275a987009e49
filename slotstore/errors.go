package slotstore

import "errors"

var (
	// ErrInvalidJob reports a job name that can't be part of a key: empty, or
	// holding '{' or '}'.
	ErrInvalidJob = errors.New("slotstore: invalid job name")

	// ErrForeignLease reports a slot.Lease that this Store did not make.
	ErrForeignLease = errors.New("slotstore: lease of another store")
)

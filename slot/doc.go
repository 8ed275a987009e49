// Package slot is the vocabulary that the scheduler and a slot store share,
// the way database/sql/driver sits between database/sql and its drivers: a
// claim on a (job, scheduled time) slot, its result, the record a slot ends
// with, a request to finish a run, and the lease a won claim holds.
//
// The name is the noun both sides talk about. The package has no behaviour
// and imports nothing of Redis, so that the scheduler (package scheduler) and
// the Redis store (package slotstore) can each import it without importing
// each other, and a test can stand in for the store with leases of its own.
//
// # Claims
//
// A Claim asks a store to decide one slot. Its Kind says how:
//
//   - ClaimLive: at the slot's time. Past the deadline the slot is recorded
//     missed; while another run holds the job (overlap skip) it is recorded
//     skipped.
//   - ClaimCatchup: a slot that every replica missed; a run in progress
//     answers OutcomeBusy instead of recording skipped. A backfill's
//     (Claim.OverMissed) also wins a slot recorded missed: no run of it
//     ever started.
//   - ClaimMiss: record the slot missed, with a reason, unless it has a record.
//   - ClaimTakeover: settle a running slot whose owner may be gone: run it as
//     the next attempt, or record it abandoned.
//
// The store answers each claim with a Result, whose Outcome says what
// happened. Losing a race is an outcome, not an error.
//
// # Records
//
// Every slot ends with a Record in one of the final States. A record outlives
// its run (the job's retention), so that a finished slot stays closed. Only
// a missed record, which no run ever followed, can give way: to a
// backfill's claim (Claim.OverMissed), and then to a run's record.
//
// # Leases
//
// A won claim carries a Lease: the run's token, fence and attempt, and a
// context that is cancelled, with a cause wrapping ErrLeaseLost, as soon as
// ownership can no longer be proven. A lease can be lost at any moment.
package slot

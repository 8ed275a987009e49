// Package scheduler runs a cron table on N identical replicas so that each
// slot of each job starts once.
//
// # Slots
//
// A slot is (job, scheduled time). The time comes from the job's schedule
// (see ParseSchedule), never from a replica's clock: cron expressions are in
// UTC unless they say CRON_TZ=, and @every D is aligned to the Unix epoch, so
// every replica computes the same slots. When a slot is due, every replica
// claims it; the claim script in Redis writes the slot's record for exactly
// one of them, the winner, which runs the job. The record outlives the run
// (for the job's retention), so a replica whose clock lags, or that ticks late,
// finds it and does nothing: a job that finishes in a millisecond is not run
// again.
//
//	claimer, _ := slotstore.New(rdb, "slotcron")
//	s, err := scheduler.New(claimer, registry,
//		scheduler.WithJobs(scheduler.Job{Name: "lottery", Schedule: "0 0 12 * * *"}),
//		scheduler.WithLogger(logger))
//	if err != nil {
//		return err // every problem of the table, at once
//	}
//	return s.Run(ctx) // until ctx ends, then a graceful stop
//
// # Timing
//
// One timer waits for the earliest due slot of the whole table; when it fires
// the replica sends the claims of every job due then in one round trip (one
// script call on a single Redis). There is no polling loop. The winner starts
// the job at once.
//
// # Policies
//
// Each Job has:
//   - timeout: the run's context ends after it (cause jobs.ErrTimeout).
//   - overlap: skip (default) records a slot skipped while a run of the same
//     job holds the job's lease; allow runs it anyway.
//   - misfire_grace (default 1m): a slot may start up to this late, judged on
//     Redis's clock; past it the slot is recorded missed, never started late.
//   - catchup (default last) and catchup_window (default 1h): when a replica
//     starts, the slots after the job's latest recorded slot that no replica
//     ran (all were down) are recorded missed (none), or the latest of them
//     runs and the rest are recorded missed (last), or each runs, oldest
//     first, one at a time (all), within catchup_window; the older ones
//     are recorded missed, back to the retention (at most MaxCatchupSlots
//     slots a job in all). Slots less than max_skew old are claimed live
//     instead, since a lagging replica may be claiming them. A job's first
//     deployment catches nothing up. A replica that stops mid catch-up
//     records missed the slots it had not reached, but those a live peer
//     holds in its own catch-up. Backfill runs, once, the slots of a range
//     that never started: those with no record, and those recorded missed.
//   - on_owner_lost: abandon (default) records the slot abandoned when its
//     owner loses its lease (at most once); retry lets another replica take it
//     over as the next attempt, with a larger fence, up to max_attempts (at
//     least once).
//   - retention (default 24h): how long slot records stay; it must cover
//     misfire_grace + max_skew and catchup_window + max_skew, or New refuses.
//   - lease_ttl: see WithLeaseTTL.
//
// Every slot ends with a record: done, failed, missed, skipped or abandoned.
//
// # Leases
//
// The winner holds a lease on the run, renewed with every other lease the
// replica holds in one round trip per renew period (TTL/3 by default). The
// job's context is cancelled as soon as ownership can no longer be proven,
// with a cause that wraps slot.ErrLeaseLost: a failed token check, or the
// TTL running out while renewals fail. Other replicas watch a running slot,
// and settle it by the job's policy once its owner's lease is gone.
//
// # Clocks
//
// Each replica measures the offset of Redis's TIME from its own clock at
// start and every minute. Above warn_skew (250ms) it logs a warning; above
// max_skew (2s) it refuses to claim, and logs why, until the offset is back
// under; meanwhile it goes by Redis's clock as measured, not its own: it
// plans its start on it, and Redis records the slots it refuses, and an
// outage's missed slots, on its own clock. A clock that steps is measured
// again before anything is claimed or queued on it. A replica whose clock runs ahead
// by less than max_skew may start a slot that much early; the slot still
// starts once.
//
// # Stopping
//
// When Run's context ends, the replica stops claiming at once. Running jobs
// go on for the shutdown grace (30s), then their contexts are cancelled with
// cause ErrShutdown, and their outcome is recorded on a context that outlives
// the stop. Run returns when every goroutine it started has exited.
//
// # Failures
//
// A panicking job fails its run, with the stack in the record; the process
// goes on. While Redis is unreachable the replica retries its claims with
// backoff: a claim that gets through after the misfire grace records the
// slot missed. A run whose outcome can't be recorded stays "running" until a
// replica settles it by policy.
//
// # Observability
//
// Each replica traces each slot it considers in a root span whose name ends
// as its kind and this replica's outcome: "slot won", "slot lost",
// "slot skipped", "slot missed", "slot paused", "slot error",
// "slot refused_skew", "slot refused_protocol" and so on; "slot.watch alive" for a check on a running
// slot whose owner may be gone; "slot.manual won" for a manual slot;
// "slot.backfill won" for Backfill. The span starts as its kind alone ("slot"),
// which is the name a sampler sees. An outcome this version does not know
// ends it as "<kind> unknown". The names are a small fixed set, so a trace
// viewer's timeline reads each replica's outcome on its row; the replica and
// the holder are attributes: slotcron.job, slotcron.slot, slotcron.replica,
// slotcron.outcome, slotcron.holder, slotcron.fence and slotcron.attempt. Its
// children are lock.claim, job.run (with lease.renewed and lease.lost events)
// and lock.finish. With NewIDGenerator in the SDK, the trace ID is derived
// from the key prefix, the job and the slot (SlotTraceID), so every replica's
// spans for a slot share one trace. Metrics: slotcron.claims,
// slotcron.dispatch_delay, slotcron.job_duration, slotcron.lease_renewals,
// slotcron.lease_lost and slotcron.clock_offset. Logs use log/slog with the
// same attribute names.
package scheduler

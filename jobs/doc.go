// Package jobs is the contract between slotcron and the work it runs.
//
// # Jobs
//
// A job is a Func. It receives a context and the Run it belongs to: the job's
// name, the scheduled slot (the time from the cron expression, never a
// replica's clock), the attempt number, the fencing token, the replica that
// runs it and the token of its lease.
//
//	func drawLottery(ctx context.Context, run jobs.Run) error {
//		return store.WriteDraw(ctx, run.Slot, run.Fence, pick(10))
//	}
//
// The context ends when the run's timeout passes, when the scheduler stops,
// or when the lease is lost; in that last case context.Cause wraps
// locking.ErrLeaseLost. Stop writing when it ends, and pass Run.Fence to the
// stores you write to, so that they refuse a paused former owner.
//
// # Registry
//
// A Registry maps names to Funcs. The cron table names jobs; Register rejects
// an empty name, a name outside [A-Za-z0-9_.-] and a duplicate.
//
// # Middleware
//
// Middleware wraps a Func the way robfig/cron's Chain wraps jobs: Recover turns
// a panic into an error that carries the stack, Timeout bounds a run, Chain
// composes them. The scheduler runs every job through Recover, and through
// Timeout when the job has one, so a panicking job fails its run and never
// takes the process down.
package jobs

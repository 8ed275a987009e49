// Package slotstore is the slot protocol on Redis: the store that decides,
// for every replica of a deployment, which one runs each (job, scheduled time)
// slot. It implements the contract of package slot, and the scheduler uses it
// through an interface of its own (scheduler.Claimer), so neither imports the
// other. It is named for what it keeps: one record per slot, which outlives
// its run, so that a finished slot stays closed.
//
// # Keys
//
// Every key of a job shares one hash tag, so that every script touches one
// Redis Cluster slot:
//
//	<prefix>:{<job>}:slot:<unix>   a slot's record (a string), kept for the retention
//	<prefix>:{<job>}:manual:<id>   a manual slot's record, the same
//	<prefix>:{<job>}:state         the job's state (a hash): its lease ("<token>
//	                               <slot> <until_ms> <replica>"), a slot's own
//	                               lease when overlap is allowed, its fence, its
//	                               latest slot with a record, its running
//	                               slots, the 32 that ended last, its pause
//
// A record is "<state> <fence> <attempt> <started> <finished> <at> <lease>
// <token> <run_id> <slot> " and five texts (owner, error, result, and a
// manual slot's who and why), each "<length>:<text>": see RecordKey.
//
// This is protocol 2 (Protocol). Protocol 1 kept a record as a hash and a
// key per job for each of the lease, fence, high-water mark, running set,
// history and pause: JobStates reads those in, converting the records of
// slots still running; records that protocol 1 finished stay hashes, which
// every script and reader takes as the records they are.
//
// # Operations
//
// Claim decides a batch of claims in one round trip: on a single server one
// script call, on a Cluster one call per hash slot; a winning claim costs
// Redis three commands (read the job's state, create the record unless it
// exists, write the job's state). Peek reads many slots' records in one
// MGET. Renew keeps a replica's leases alive, all in one round trip,
// comparing each token inside the script. Finish records how runs ended and
// frees their leases, in three commands while the run's lease holds; it never
// deletes a record. A takeover (slot.ClaimTakeover) settles a running slot
// whose owner lost its lease, by policy. A backfill's catch-up claim
// (slot.Claim.OverMissed) wins a slot recorded missed as if it had no record,
// in the same script call, so it runs at most once: its record becomes the
// run's. Every other claim loses to a missed record.
//
// Every time that decides anything (a deadline, a record's stamps) is Redis's
// TIME, read inside the scripts. Scripts are sent with EVALSHA, and again with
// EVAL after a NOSCRIPT (a restart or failover emptied the script cache).
//
// # Scripts
//
// One Lua file per operation under scripts/, each with a header that states
// its KEYS, its ARGV and what it returns.
package slotstore

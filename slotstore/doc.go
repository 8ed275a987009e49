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
//	<prefix>:{<job>}:slot:<unix>   the slot record (hash), kept for the retention
//	<prefix>:{<job>}:lease         the job's lease: "<token> <slot> <replica>"
//	<prefix>:{<job>}:lease:<unix>  a slot's own lease, when overlap is allowed
//	<prefix>:{<job>}:fence         the fencing-token counter
//	<prefix>:{<job>}:runs          the run history (a capped stream)
//	<prefix>:{<job>}:last          the latest slot that has a record
//	<prefix>:{<job>}:running       the slots whose records are running
//
// # Operations
//
// Claim decides a batch of claims in one round trip: on a single server one
// script call, on a Cluster one call per hash slot. Renew keeps a replica's
// leases alive, all in one round trip, comparing each token inside the
// script. Finish records how runs ended and frees their leases; it never
// deletes a record. A takeover (slot.ClaimTakeover) settles a running slot
// whose owner lost its lease, by policy.
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

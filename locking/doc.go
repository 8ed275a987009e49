// Package locking holds leases on Redis keys: the only package of slotcron that
// talks to Redis.
//
// # Leases
//
// A Lease is ownership of one key, proven by a 128-bit random token. Obtain
// tries once (one round trip) and returns ErrNotObtained when another owner
// holds the key; Lock waits for it. Every operation that changes the key
// (Extend, Release) compares the token inside a Lua script, so an owner can
// never delete or extend a key that is no longer its own.
//
//	locks := locking.New(rdb)
//	lease, err := locks.Lock(ctx, locking.Key("app", "report"), 15*time.Second,
//		locking.WithWatchdog(), locking.WithFencing())
//	if err != nil {
//		return err
//	}
//	defer lease.Release(ctx)
//	return doWork(lease.Context(), lease.Fence())
//
// # Loss
//
// A lease can be lost at any moment. Lease.Done and Lease.Context report it as
// soon as ownership can no longer be proven: when a token check fails, or when
// the TTL runs out without a confirmed renewal. The lease measures that TTL on
// the local monotonic clock from the moment it sent the request that set it,
// less a drift margin of 1% + 2ms, so it gives up ownership before Redis can
// expire the key, even while a renewal hangs on a frozen server and whatever
// the client's socket timeouts. The cause of the context's cancellation wraps
// ErrLeaseLost and says why.
//
// # Watchdog
//
// WithWatchdog, or Lease.KeepAlive, starts one goroutine per lease that renews
// it every TTL/3, as Redisson does. A failed token check ends the lease at once;
// a network error is retried until the TTL would have run out. The goroutine
// stops on Release or loss.
//
// # Waiting
//
// Lock subscribes to a release channel derived from the key (same hash tag)
// and wakes on the message that Release publishes. In case a message is missed
// or the holder dies without releasing, it also retries after a jittered backoff
// (WithBackoff) that never exceeds the holder's remaining TTL. It never polls
// at a fixed interval. Each waiting Lock holds one pub/sub connection.
//
// # Fencing
//
// WithFencing makes a lease carry a number that grows with every lease taken
// on the key, incremented in the same script. A lock alone cannot stop a paused
// ("zombie") owner from writing after its lease expired; a store that refuses
// writes with a fence lower than the highest it has seen can (Kleppmann, "How to
// do distributed locking", 2016).
//
// # Keys and Redis Cluster
//
// Key("prefix", "name") returns "prefix:{name}". Keys derived from a key (the
// fence counter, the release channel) share its hash tag, so every script
// touches one cluster slot. A key without a hash tag is treated as if it were
// its own tag.
//
// # Designs not offered
//
//   - SETNX then EXPIRE: two commands, so a crash between them leaves a lock that never expires.
//   - The GETSET expiry dance: it trusts client clocks, and a loser's GETSET overwrites the winner's value.
//   - DEL without a token check: an owner whose lease expired deletes the next owner's lock.
//
// # Errors
//
// ErrNotObtained is an outcome (another owner won), not a failure. ErrNotHeld
// means the token no longer owns the key. ErrLeaseLost is the cause of a lost
// lease's context. ErrInvalidKey reports a key that can't be used as asked.
// Other errors come from Redis and are wrapped with %w.
package locking

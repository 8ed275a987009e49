// Package locking holds leases on Redis keys: a lock family that a program can
// import on its own, with nothing of the scheduler in it (the scheduler's slot
// protocol on Redis is package slotstore).
//
// # The family
//
//   - Lease (Client.Obtain, Client.Lock): one owner per key, proven by a token.
//   - Reentrant (Client.Reentrant): one owner that may hold several times over.
//   - RWMutex (Client.RWMutex): many readers or one writer.
//   - Redlock (NewRedlock): one owner per key across N independent masters.
//
// Every acquisition of the lock family returns a *Lease: the same Key, Token,
// Fence, TTL, Extend, Release, KeepAlive, Done and Context, whatever the kind
// of lock.
//
// # Leases
//
// A Lease is ownership of one key, proven by a 128-bit random token. Obtain
// tries once (one round trip) and returns ErrNotObtained when another owner
// holds the key; Lock waits for it. Every operation that changes a key compares
// the token inside a Lua script, so an owner never deletes or extends a key
// that is no longer its own.
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
// Release runs on a context detached from its argument and bounded to 5s, so
// it works during shutdown; it is idempotent.
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
// ErrLeaseLost and says why: test it with errors.Is.
//
// # Watchdog
//
// WithWatchdog, or Lease.KeepAlive, starts one goroutine per lease that renews
// it every TTL/3, as Redisson does. A failed token check ends the lease at once;
// a network error is retried until the TTL would have run out. The goroutine
// stops on Release or loss. Its renewals and Extend take turns, one in flight
// at a time, so that the lease's deadline comes from the renewal that Redis
// ran last.
//
// # Waiting
//
// Lock, Reentrant.Lock, RWMutex.RLock and RWMutex.Lock subscribe to a release
// channel derived from the key (same hash tag) and wake on the message that a
// release publishes. In case a message is missed or the holder dies without
// releasing, they also retry after a jittered backoff (WithBackoff) that never
// exceeds the holder's remaining TTL. They never poll at a fixed interval.
// Each waiting call holds one pub/sub connection.
//
// # Reentrant lock
//
// One hash per lock, as Redisson has, but with a field per hold: "o" is the
// owner ID, and each hold is a field "h:<token>" of its own. Go has no thread
// identity, so the owner is explicit. Each hold is a Lease whose Release gives
// up that hold and no other (sent again after a lost reply, or after the
// hold expired, it gives up nothing); the key goes, and waiters wake, when
// the last hold is given up. A release by another owner returns
// ErrNotHeld and changes nothing. When the hash expires, every hold ends.
//
// # Read-write lock
//
// One hash per lock, so all its state is in one cluster slot. Each holder has
// its own field, named by its own token and valued with its own expiry on
// Redis's clock (TIME); the scripts prune expired holders, so a dead reader
// blocks nobody and no reader can release or extend another's hold. A writer
// that waits marks itself in the hash and new readers queue behind it, so a
// steady stream of readers cannot starve a writer (PreferReaders turns this
// off). The lock never trusts a client's clock.
//
// # Redlock
//
// Redlock takes a key on a majority of N independent masters in parallel, each
// request bounded by a node timeout, and holds it for TTL − elapsed − (TTL × 1%
// + 2ms). A failed attempt unlocks on every node; attempts are retried a
// bounded number of times after a random delay; Extend needs a quorum. It is
// an efficiency lock: it cannot fence, and a paused process can outlive its
// lease without knowing (Kleppmann, "How to do distributed locking", 2016).
// When correctness depends on the lock, use a Lease with WithFencing and make
// the protected store check the fence.
//
// # Fencing
//
// WithFencing makes a lease carry a number that grows with every lease taken
// on the key, incremented in the same script. A lock alone cannot stop a paused
// ("zombie") owner from writing after its lease expired; a store that refuses
// writes with a fence lower than the highest it has seen can.
//
// # Keys and Redis Cluster
//
// Key("prefix", "name") returns "prefix:{name}". Keys derived from a key (the
// fence counter, key + ":fence"; the release receipt, key + ":release-receipt";
// the release channel) share its hash tag, so every script touches one
// cluster slot; a key without a hash tag is treated as its own tag
// ("{key}:fence"). Do not lock a key that is another lock's derived key: a
// release never writes its receipt over such a lock, but the receipt, while
// it lasts, makes the name look held.
// The test suite runs every script on a three-master cluster.
//
// # Designs not offered
//
//   - SETNX then EXPIRE: two commands, so a crash between them leaves a lock that never expires.
//   - The GETSET expiry dance: it trusts client clocks, and a loser's GETSET overwrites the winner's expiry.
//   - DEL without a token check: an owner whose lease expired deletes the next owner's lock.
//   - The two-key read-write lock: one shared "read" field lets any reader release or extend every reader's hold, and its two keys can't share a cluster slot.
//
// # Errors
//
// ErrNotObtained is an outcome (another owner won), not a failure. ErrNotHeld
// means the token no longer owns the key. ErrLeaseLost is the cause of a lost
// lease's context. ErrInvalidKey reports a key that can't be used as asked.
// Other errors come from Redis and are wrapped with %w.
package locking

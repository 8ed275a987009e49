package locking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// Lock waits for a key, holds it with a watchdog, and hands the fencing token
// to whatever it writes. The README shows this example.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks := locking.New(rdb)

	key := locking.Key("example", "nightly-report") // "example:{nightly-report}"
	lease, err := locks.Lock(ctx, key, 15*time.Second, locking.WithWatchdog(), locking.WithFencing())
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	defer lease.Release(ctx)

	// Work under lease.Context(): it is cancelled, with cause ErrLeaseLost,
	// the moment ownership can no longer be proven.
	work := lease.Context()
	fmt.Println("held:", work.Err() == nil, "fence > 0:", lease.Fence() > 0)

	// A second owner is refused while the lease is held.
	_, err = locks.Obtain(ctx, key, 15*time.Second)
	fmt.Println("second owner:", errors.Is(err, locking.ErrNotObtained))
	// Output:
	// held: true fence > 0: true
	// second owner: true
}

// Obtain tries once; losing the race is an outcome, not a failure.
func ExampleClient_Obtain() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks := locking.New(rdb)
	key := locking.Key("example", "obtain")

	first, err := locks.Obtain(ctx, key, time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = locks.Obtain(ctx, key, time.Second)
	fmt.Println("second:", err)
	fmt.Println("release:", first.Release(ctx))
	fmt.Println("release again:", first.Release(ctx))
	// Output:
	// second: locking: not obtained
	// release: <nil>
	// release again: <nil>
}

// A reentrant lock counts the holds of one owner; the key goes with the last.
func ExampleReentrant() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks := locking.New(rdb)
	lock := locks.Reentrant(locking.Key("example", "reentrant"), "worker-7")

	outer, _ := lock.Lock(ctx, time.Second)
	inner, _ := lock.Lock(ctx, time.Second) // the same owner: no wait
	n, _ := lock.Holds(ctx)
	fmt.Println("holds:", n)
	inner.Release(ctx)
	outer.Release(ctx)
	n, _ = lock.Holds(ctx)
	fmt.Println("holds:", n)
	// Output:
	// holds: 2
	// holds: 0
}

// Readers share; a writer excludes them, and while it waits new readers queue.
func ExampleRWMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	rw := locking.New(rdb).RWMutex(locking.Key("example", "rw"))

	r1, _ := rw.RLock(ctx, time.Second)
	r2, _ := rw.RLock(ctx, time.Second)
	_, err := rw.TryLock(ctx, time.Second)
	fmt.Println("writer while reading:", err)
	r1.Release(ctx)
	r2.Release(ctx)
	w, err := rw.TryLock(ctx, time.Second)
	fmt.Println("writer after:", err)
	w.Release(ctx)
	// Output:
	// writer while reading: locking: not obtained
	// writer after: <nil>
}

// Redlock needs a majority of independent masters. Here three databases of
// one server stand in for three masters, so that the example runs anywhere.
func ExampleRedlock() {
	ctx := context.Background()
	var nodes []locking.RedisClient
	for db := range 3 {
		c := redis.NewClient(&redis.Options{Addr: redisAddr, DB: db})
		defer c.Close()
		nodes = append(nodes, c)
	}
	rl, err := locking.NewRedlock(nodes, locking.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := rl.Obtain(ctx, locking.Key("example", "redlock"), 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("quorum:", rl.Quorum(), "held until:", lease.Deadline().After(time.Now()))
	// Output:
	// quorum: 2 held until: true
}

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

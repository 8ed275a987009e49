package locking_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// sentAgain is a hook that, once armed, runs the next script call twice,
// as go-redis does with a call whose reply was lost (it retries a call cut
// off by EOF or a read timeout, MaxRetries 3 by default): the caller sees
// the second run's answer.
type sentAgain struct {
	processOnly
	armed atomic.Bool
}

func (h *sentAgain) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && h.armed.CompareAndSwap(true, false) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// TestReentrantReleaseSentAgainGivesUpNoOtherHold: an owner has two holds;
// the reply to the first hold's Release is lost, and go-redis sends the
// unlock script again (sentAgain). The lock counted holds per owner, so the second
// run gave up the second hold too: the lock was deleted while that hold's
// Lease still reported it held, and another owner took it. Each hold now
// has a token of its own.
func TestReentrantReleaseSentAgainGivesUpNoOtherHold(t *testing.T) {
	srv, rdb, _ := setup(t)
	ctx := context.Background()
	again := &sentAgain{}
	prdb := redis.NewClient(srv.Options())
	defer prdb.Close()
	prdb.AddHook(again)
	key := srv.Key("reentrant-lost-reply")
	r := locking.New(prdb).Reentrant(key, "owner")

	// Load the unlock script, so that the armed Release is one EVALSHA.
	warm, err := r.TryLock(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h1, err := r.TryLock(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := r.TryLock(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(ctx)
	again.armed.Store(true)
	err = h1.Release(ctx) // nil: the second run found the hold's receipt (TestAReleaseSentAgainIsNotNotHeld)
	if again.armed.Load() {
		t.Fatal("the Release sent no script: the test shows nothing")
	}
	if n, herr := locking.New(rdb).Reentrant(key, "owner").Holds(ctx); herr != nil || n != 1 {
		t.Fatalf("after h1's Release with its reply lost (%v): the owner has %d holds (%v), want 1: h2's", err, n, herr)
	}
	if other, err := locking.New(rdb).Reentrant(key, "other").TryLock(ctx, time.Minute); !errors.Is(err, locking.ErrNotObtained) {
		if other != nil {
			other.Release(ctx)
		}
		t.Fatalf("another owner's TryLock while h2 holds: %v, want ErrNotObtained", err)
	}
	if err := h2.Context().Err(); err != nil {
		t.Fatalf("h2 reports its lease lost: %v", context.Cause(h2.Context()))
	}
}

// TestAStaleReentrantHoldReleasesNoNewerOne: a hold expires (its Lease
// reports the loss), the same owner takes a new hold, and then the stale
// hold is released. With the owner ID as the only token, that Release gave
// up the new hold: another owner got in while the new hold reported it
// held, and Release returned nil.
func TestAStaleReentrantHoldReleasesNoNewerOne(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("reentrant-stale")
	r := lk.Reentrant(key, "owner")
	old, err := r.TryLock(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-old.Done() // lost: its TTL ran out
	for rdb.Exists(ctx, key).Val() == 1 {
		time.Sleep(5 * time.Millisecond)
	}
	fresh, err := r.TryLock(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if err := old.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Errorf("the stale hold's Release: %v, want ErrNotHeld", err)
	}
	if other, err := lk.Reentrant(key, "other").TryLock(ctx, time.Minute); !errors.Is(err, locking.ErrNotObtained) {
		if other != nil {
			other.Release(ctx)
		}
		t.Fatalf("another owner's TryLock after the stale Release: %v, want ErrNotObtained (the fresh hold holds)", err)
	}
}

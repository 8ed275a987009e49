package locking_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// TestAReleaseSentAgainIsNotNotHeld: the answer to a Release is lost and
// go-redis sends the script again (sentAgain). The first run released the
// hold; the second found it gone and answered ErrNotHeld, as if the lease
// had been lost, for every kind of hold. A release now leaves its token in
// a receipt that the second run finds. A hold that really was lost still
// answers ErrNotHeld (TestForeignTokenCannotReleaseOrExtend and its kin).
func TestAReleaseSentAgainIsNotNotHeld(t *testing.T) {
	for name, obtain := range holdKinds(time.Minute) {
		t.Run(name, func(t *testing.T) {
			srv, rdb, _ := setup(t)
			ctx := context.Background()
			again := &sentAgain{}
			prdb := redis.NewClient(srv.Options())
			defer prdb.Close()
			prdb.AddHook(again)
			// Two keys: one built with locking.Key (a hash tag), one without.
			for _, key := range []string{locking.Key(srv.Key("app"), "resent"), srv.Key("resent")} {
				// Load the scripts, so that the armed Release is one EVALSHA.
				warm, err := obtain(ctx, prdb, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := warm.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l, err := obtain(ctx, prdb, key)
				if err != nil {
					t.Fatal(err)
				}
				again.armed.Store(true)
				err = l.Release(ctx)
				if again.armed.Load() {
					t.Fatal("the Release sent no script: the test shows nothing")
				}
				if err != nil {
					t.Errorf("%s: Release sent again: %v, want nil: the first run released it", key, err)
				}
				if cause := context.Cause(l.Context()); errors.Is(cause, locking.ErrLeaseLost) {
					t.Errorf("%s: the lease ended as lost: %v", key, cause)
				}
				next, err := obtain(ctx, rdb, key)
				if err != nil {
					t.Fatalf("%s: the key is not free after the Release: %v", key, err)
				}
				if err := next.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestARedlockLostAfterAFailedAttemptIsNotHeld: Redlock's attempts share one
// token, and a failed attempt unlocks every node. Had that unlock left a
// release receipt of the token, a lease that a later attempt won and then
// lost would find the receipt at its Release and answer nil, not
// ErrNotHeld. Found by review.
func TestARedlockLostAfterAFailedAttemptIsNotHeld(t *testing.T) {
	_, clients, rl := fiveNodes(t, locking.WithRetries(200, 10*time.Millisecond))
	ctx := context.Background()
	key := locking.Key("app", "redlock-receipt")
	for _, c := range clients[1:4] { // a majority held by another owner
		if err := c.Set(ctx, key, "blocker", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Once the first attempt has failed (no quorum) and its unlock has run
	// on node 0, the blockers go, and the next attempt wins.
	unblock := &afterUnlock{do: func() error {
		for _, c := range clients[1:4] {
			if err := c.Del(ctx, key).Err(); err != nil {
				return err
			}
		}
		return nil
	}}
	clients[0].AddHook(unblock)
	l, err := rl.Obtain(ctx, key, 200*time.Millisecond)
	if !unblock.done.Load() {
		t.Fatalf("no attempt failed before Obtain returned (%v): the test shows nothing", err)
	}
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	<-l.Done() // no watchdog: the lease runs out
	for _, c := range clients {
		for c.Exists(ctx, key).Val() == 1 { // and Redis expires the key on every node
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := l.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Errorf("Release of a lease that ran out everywhere: %v, want ErrNotHeld", err)
	}
}

// TestAReceiptIsNeverWrittenOverAnotherLock: a release writes its receipt
// under a name derived from the lock's key. A caller may have locked that
// very name: the receipt must not be written over it (it was: a SET over
// the other lock's key, with the receipt's one-minute TTL, while its owner
// still reported it held for ten), whatever type that lock is. Found by
// review.
func TestAReceiptIsNeverWrittenOverAnotherLock(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	others := map[string]func(name string) (*locking.Lease, error){
		"lease":     func(name string) (*locking.Lease, error) { return lk.Obtain(ctx, name, 10*time.Minute) },
		"reentrant": func(name string) (*locking.Lease, error) { return lk.Reentrant(name, "a").TryLock(ctx, 10*time.Minute) },
	}
	for kind, obtain := range others {
		tagged, plain := locking.Key(srv.Key("app"), kind), srv.Key("plain-"+kind)
		for key, name := range map[string]string{tagged: tagged + ":release-receipt", plain: "{" + plain + "}:release-receipt"} {
			a, err := obtain(name)
			if err != nil {
				t.Fatal(err)
			}
			b, err := lk.Obtain(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatalf("%s: B's Release: %v", name, err)
			}
			left, err := a.TTL(ctx)
			if err != nil {
				t.Errorf("%s %s: A's hold after B's Release: %v (%s)", kind, name, err, rdb.Type(ctx, name).Val())
			} else if left < 9*time.Minute {
				t.Errorf("%s %s: A's hold's TTL is %v after B's Release; want its 10m", kind, name, left)
			}
			if err := a.Release(ctx); err != nil {
				t.Errorf("%s %s: A's Release: %v", kind, name, err)
			}
		}
	}
}

// afterUnlock is a go-redis hook that runs do once, after the first release
// script (its channel argument ends in ":released") has run on its client.
type afterUnlock struct {
	processOnly
	do   func() error
	done atomic.Bool
}

func (h *afterUnlock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if ch, ok := args[len(args)-2].(string); ok && len(args) == 7 && strings.HasSuffix(ch, ":released") && !h.done.Load() {
			if derr := h.do(); derr != nil {
				return derr
			}
			h.done.Store(true)
		}
		return err
	}
}

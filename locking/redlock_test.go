package locking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

func fiveNodes(t *testing.T, opts ...locking.RedlockOption) ([]*redistest.Server, []*redis.Client, *locking.Redlock) {
	t.Helper()
	servers := redistest.StartN(t, 5)
	var (
		clients []*redis.Client
		nodes   []locking.RedisClient
	)
	for _, s := range servers {
		c := s.Client()
		clients = append(clients, c)
		nodes = append(nodes, c)
	}
	rl, err := locking.NewRedlock(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return servers, clients, rl
}

// holders counts the nodes whose key holds token.
func holders(clients []*redis.Client, key, token string) int {
	n := 0
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if c.Get(ctx, key).Val() == token {
			n++
		}
		cancel()
	}
	return n
}

func TestRedlockWorksWithTwoNodesStopped(t *testing.T) {
	servers, clients, rl := fiveNodes(t)
	servers[0].Stop()
	servers[3].Stop()
	ctx := context.Background()
	l, err := rl.Obtain(ctx, "job", time.Second)
	if err != nil {
		t.Fatalf("Obtain with 3 of 5 up: %v", err)
	}
	if n := holders(clients, "job", l.Token()); n != 3 {
		t.Fatalf("%d nodes hold the token, want the 3 that are up", n)
	}
	ttl, err := l.TTL(ctx)
	if err != nil || ttl <= 0 {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holders(clients, "job", l.Token()); n != 0 {
		t.Fatalf("%d nodes still hold the token after Release", n)
	}
}

func TestRedlockFailsCleanlyWithThreeNodesStopped(t *testing.T) {
	servers, clients, rl := fiveNodes(t, locking.WithRetries(2, 20*time.Millisecond))
	for _, i := range []int{0, 2, 4} {
		servers[i].Stop()
	}
	start := time.Now()
	l, err := rl.Obtain(context.Background(), "job", time.Second)
	took := time.Since(start)
	if !errors.Is(err, locking.ErrNotObtained) || l != nil {
		t.Fatalf("Obtain with 2 of 5 up = %v, %v; want ErrNotObtained", l, err)
	}
	t.Logf("refused after %v: %v", took.Round(time.Millisecond), err)
	// 3 attempts, each at most a node timeout (50ms) to obtain and one more to
	// unlock, plus two random delays of at most 20ms, plus 100ms of slack.
	if took > 3*2*50*time.Millisecond+2*20*time.Millisecond+100*time.Millisecond {
		t.Fatalf("refusal took %v", took)
	}
	for _, i := range []int{1, 3} {
		if n := clients[i].Exists(context.Background(), "job").Val(); n != 0 {
			t.Fatalf("node %d kept the key of a failed attempt", i)
		}
	}
}

func TestRedlockPausedNodeBoundedByNodeTimeout(t *testing.T) {
	const nodeTimeout = 100 * time.Millisecond
	servers, clients, rl := fiveNodes(t, locking.WithNodeTimeout(nodeTimeout))
	ctx := context.Background()
	for _, paused := range []int{1, 2} {
		for i := range paused {
			servers[i].Pause()
		}
		start := time.Now()
		l, err := rl.Obtain(ctx, "paused", time.Second)
		took := time.Since(start)
		for i := range paused {
			servers[i].Resume()
		}
		if err != nil {
			t.Fatalf("%d paused: Obtain: %v", paused, err)
		}
		t.Logf("%d of 5 paused: acquired in %v (node timeout %v)", paused, took.Round(time.Microsecond), nodeTimeout)
		if took > nodeTimeout {
			t.Fatalf("%d paused: acquiring took %v, more than the node timeout %v", paused, took, nodeTimeout)
		}
		if n := holders(clients, "paused", l.Token()); n < rl.Quorum() {
			t.Fatalf("only %d nodes hold the token", n)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// With a majority frozen, no attempt can succeed; each one ends at the node timeout.
	for i := range 3 {
		servers[i].Pause()
	}
	rl2, _ := locking.NewRedlock([]locking.RedisClient{clients[0], clients[1], clients[2], clients[3], clients[4]},
		locking.WithNodeTimeout(nodeTimeout), locking.WithRetries(0, 0))
	start := time.Now()
	_, err := rl2.Obtain(ctx, "frozen", time.Second)
	took := time.Since(start)
	for i := range 3 {
		servers[i].Resume()
	}
	if !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("3 paused: %v", err)
	}
	if took > nodeTimeout+releaseBound {
		t.Fatalf("3 paused: refusal took %v", took)
	}
}

// releaseBound is the unlock that follows a failed attempt: one more node timeout.
const releaseBound = 150 * time.Millisecond

// TestRedlockMinorityCannotHold: A holds the lock; two nodes restart and lose
// A's key. B can then take the key on those two, a minority, and must neither
// get the lock nor leave its keys there.
func TestRedlockMinorityCannotHold(t *testing.T) {
	servers, clients, rl := fiveNodes(t, locking.WithRetries(1, 10*time.Millisecond))
	ctx := context.Background()
	a, err := rl.Obtain(ctx, "contested", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Obtain returns on a quorum; let the last two SETs land before the
	// restarts, or go-redis retries them onto the fresh servers.
	deadline := time.Now().Add(time.Second)
	for holders(clients, "contested", a.Token()) != 5 {
		if time.Now().After(deadline) {
			t.Fatal("A's key is not on all 5 nodes after 1s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	servers[0].Restart()
	servers[1].Restart()
	b, err := rl.Obtain(ctx, "contested", 10*time.Second)
	if !errors.Is(err, locking.ErrNotObtained) || b != nil {
		t.Fatalf("second client on a minority: %v, %v; want ErrNotObtained", b, err)
	}
	for _, i := range []int{0, 1} {
		if v := clients[i].Get(ctx, "contested").Val(); v != "" {
			t.Fatalf("restarted node %d kept the second client's key %q", i, v)
		}
	}
	if n := holders(clients, "contested", a.Token()); n != 3 {
		t.Fatalf("A's token on %d nodes, want 3", n)
	}
	if err := a.Context().Err(); err != nil {
		t.Fatalf("A's lease ended: %v", context.Cause(a.Context()))
	}
	a.Release(ctx)
}

func TestRedlockWatchdogNeedsQuorum(t *testing.T) {
	_, clients, rl := fiveNodes(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	l, err := rl.Obtain(ctx, "kept", ttl, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lease ended under the watchdog: %v", context.Cause(l.Context()))
	}
	// Two nodes lose the key: a quorum of 3 still confirms.
	clients[0].Del(ctx, "kept")
	clients[1].Del(ctx, "kept")
	time.Sleep(ttl)
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lease ended with 3 of 5 holding: %v", context.Cause(l.Context()))
	}
	// A third loses it: no quorum, the lease ends within one TTL.
	at := time.Now()
	clients[2].Del(ctx, "kept")
	lossWithin(t, l, at, ttl)
	l.Release(ctx)
}

func TestRedlockRefusesBadUse(t *testing.T) {
	if _, err := locking.NewRedlock(nil); err == nil {
		t.Fatal("NewRedlock with no nodes")
	}
	if _, err := locking.NewRedlock([]locking.RedisClient{nil}); err == nil {
		t.Fatal("NewRedlock with a nil node")
	}
	_, _, rl := fiveNodes(t)
	if _, err := rl.Obtain(context.Background(), "k", time.Second, locking.WithFencing()); err == nil {
		t.Fatal("Redlock accepted WithFencing")
	}
	if _, err := rl.Obtain(context.Background(), "k", time.Second, locking.WithBackoff(time.Millisecond, time.Second)); err == nil {
		t.Fatal("Redlock accepted WithBackoff, which it would ignore")
	}
}

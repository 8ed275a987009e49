package locking_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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

// onAllNodes waits until every node holds token at key: Obtain returns on
// a quorum, and the last SETs land after it.
func onAllNodes(t *testing.T, clients []*redis.Client, key, token string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second) // only a guard against a hang
	for holders(clients, key, token) != len(clients) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is not on all %d nodes after 5s", key, len(clients))
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	const nodeTimeout, retryDelay = 200 * time.Millisecond, 20 * time.Millisecond
	servers, clients, rl := fiveNodes(t, locking.WithNodeTimeout(nodeTimeout), locking.WithRetries(2, retryDelay))
	for _, i := range []int{0, 2, 4} {
		servers[i].Stop()
	}
	// The refusal is bounded by its timers: 3 attempts, each at most a node
	// timeout to obtain and one more to unlock, with two random delays of at
	// most retryDelay between them. The reference runs the same timers one
	// after another, so it is as late as they are on a loaded machine. The
	// refusal also works between its 8 timers (it sends, counts, unlocks),
	// which a starved CPU slows: it may end up to one node timeout after the
	// reference, half of what one attempt more than the 3 would add.
	ref, stop := refTimers(nodeTimeout, nodeTimeout, retryDelay, nodeTimeout, nodeTimeout, retryDelay, nodeTimeout, nodeTimeout)
	defer stop()
	start := time.Now()
	var (
		l    *locking.Lease
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		l, err = rl.Obtain(context.Background(), "job", time.Second)
	}()
	dueBy(t, done, ref, nodeTimeout, "refusal with 2 of 5 up outlasted 3 attempts of two node timeouts each")
	if !errors.Is(err, locking.ErrNotObtained) || l != nil {
		t.Fatalf("Obtain with 2 of 5 up = %v, %v; want ErrNotObtained", l, err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	for _, i := range []int{1, 3} {
		if n := clients[i].Exists(context.Background(), "job").Val(); n != 0 {
			t.Fatalf("node %d kept the key of a failed attempt", i)
		}
	}
}

// TestRedlockPausedNodeBoundedByNodeTimeout: a frozen node holds up an
// attempt for at most the node timeout. While a quorum is live, the node
// timeout is long next to a loaded machine's delays (the answers of the
// live nodes, the scheduling of the goroutine that counts them: on a 2-core
// machine building images beside the tests, 500ms was once not enough, and
// the attempt that failed for it was retried), so that an attempt that
// waited for the frozen nodes is told apart from one that decided on the
// first quorum.
func TestRedlockPausedNodeBoundedByNodeTimeout(t *testing.T) {
	const quorumTimeout, nodeTimeout = 3 * time.Second, 500 * time.Millisecond
	servers, clients, rl := fiveNodes(t, locking.WithNodeTimeout(quorumTimeout))
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
		t.Logf("%d of 5 paused: acquired in %v (node timeout %v)", paused, took.Round(time.Microsecond), quorumTimeout)
		// An attempt that waits for the paused nodes ends on a timer of the
		// node timeout, which never fires early: took would be at least that.
		if took >= quorumTimeout {
			t.Fatalf("%d paused: acquiring took %v, not less than the node timeout %v: it waited for the paused nodes", paused, took, quorumTimeout)
		}
		if n := holders(clients, "paused", l.Token()); n < rl.Quorum() {
			t.Fatalf("only %d nodes hold the token", n)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// With a majority frozen, no attempt can succeed; the one attempt ends at
	// the node timeout, and the unlock that follows at one more. Without the
	// node timeout, each would wait for the client's 1s read timeout, 500ms
	// more: the refusal may end half of that after its reference, for the
	// work between its two timers.
	for i := range 3 {
		servers[i].Pause()
	}
	rl2, _ := locking.NewRedlock([]locking.RedisClient{clients[0], clients[1], clients[2], clients[3], clients[4]},
		locking.WithNodeTimeout(nodeTimeout), locking.WithRetries(0, 0))
	ref, stop := refTimers(nodeTimeout, nodeTimeout)
	defer stop()
	var (
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		_, err = rl2.Obtain(ctx, "frozen", time.Second)
	}()
	dueBy(t, done, ref, nodeTimeout/2, "3 paused: the refusal outlasted two node timeouts")
	for i := range 3 {
		servers[i].Resume()
	}
	if !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("3 paused: %v", err)
	}
}

// TestRedlockMinorityCannotHold: A holds the lock; two nodes restart and lose
// A's key. B can then take the key on those two, a minority, and must neither
// get the lock nor leave its keys there.
func TestRedlockMinorityCannotHold(t *testing.T) {
	// A node timeout far above a loaded machine's delays: with the default
	// 50ms, a SET that a busy machine kept longer was cancelled, and A's key
	// never reached all 5 nodes.
	servers, clients, rl := fiveNodes(t, locking.WithRetries(1, 10*time.Millisecond), locking.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	a, err := rl.Obtain(ctx, "contested", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Obtain returns on a quorum; let the last two SETs land before the
	// restarts, or go-redis retries them onto the fresh servers.
	onAllNodes(t, clients, "contested", a.Token())
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
	const ttl = keepAliveTTL
	l, err := rl.Obtain(ctx, "kept", ttl, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	quorum := func() error {
		if n := len(nodesHolding(clients, "kept", l.Token())); n < rl.Quorum() {
			return fmt.Errorf("only %d nodes hold the token", n)
		}
		return nil
	}
	keptAlive(t, l, 2*ttl, quorum)
	// The nodes beyond a quorum lose the key (two, unless a node already
	// lost it: a renewal stops waiting for the nodes still silent once a
	// quorum confirms, so on a loaded machine a slow node can miss renewals
	// until its key expires). A quorum of 3 still confirms. keptAlive's
	// Deadline check needs a renewal sent after the deletions.
	holding := nodesHolding(clients, "kept", l.Token())
	if len(holding) < rl.Quorum() {
		t.Fatalf("only %d nodes hold the token", len(holding))
	}
	// The quorum kept is the nodes whose key was renewed last: one that
	// missed renewals (its key's TTL the shortest) is among those deleted,
	// not left to expire under the quorum a moment later, which would be a
	// true loss (the lease ended "8ms into the hold" in one CI run).
	pttl := map[*redis.Client]time.Duration{}
	for _, c := range holding {
		pttl[c] = c.PTTL(ctx, "kept").Val()
	}
	slices.SortStableFunc(holding, func(a, b *redis.Client) int { return cmp.Compare(pttl[b], pttl[a]) })
	for _, c := range holding[rl.Quorum():] {
		c.Del(ctx, "kept")
	}
	keptAlive(t, l, ttl, quorum)
	// One more loses it: no quorum, the lease ends within one TTL.
	holding[0].Del(ctx, "kept")
	lossWithin(t, l, time.Now(), ttl)
	l.Release(ctx)
}

// nodesHolding returns the clients of the nodes whose key holds token. Every
// node must be up: each has a second to answer, which a loaded machine needs.
func nodesHolding(clients []*redis.Client, key, token string) []*redis.Client {
	var held []*redis.Client
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if c.Get(ctx, key).Val() == token {
			held = append(held, c)
		}
		cancel()
	}
	return held
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

// TestRedlockTTLCountsNoFailedNode: a node that does not answer gives no
// TTL. With 2 of 5 nodes holding, 1 not, and 2 stopped, TTL is an error (a
// quorum may or may not hold); it used to count the stopped nodes' empty
// answers as holding, and say 0 with no error.
func TestRedlockTTLCountsNoFailedNode(t *testing.T) {
	servers, clients, rl := fiveNodes(t, locking.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	l, err := rl.Obtain(ctx, "ttl", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	onAllNodes(t, clients, "ttl", l.Token())
	if err := clients[2].Del(ctx, "ttl").Err(); err != nil {
		t.Fatal(err)
	}
	servers[3].Stop()
	servers[4].Stop()
	if ttl, err := l.TTL(ctx); err == nil {
		t.Fatalf("TTL with 2 of 5 nodes holding, 1 not, 2 stopped: %v with no error; want an error", ttl)
	}
}

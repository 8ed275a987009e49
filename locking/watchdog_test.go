package locking_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

// TestWatchdogHoldsLeaseForThreeTTLs: the watchdog renews every TTL/3, so the
// key holds the token, and the lease stays live, over several TTLs.
func TestWatchdogHoldsLeaseForThreeTTLs(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("held")
	l, err := lk.Obtain(ctx, key, keepAliveTTL, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	keptAlive(t, l, 3*keepAliveTTL, tokenAt(rdb, key, l.Token()))
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("key survived Release")
	}
}

// tokenAt checks that key holds token.
func tokenAt(rdb *redis.Client, key, token string) func() error {
	return func() error {
		got, err := rdb.Get(context.Background(), key).Result()
		if err != nil || got != token {
			return fmt.Errorf("the key holds %q (%v), not the token", got, err)
		}
		return nil
	}
}

// TestWatchdogFollowsAShorterExtend: Extend makes its TTL the one the
// watchdog renews for, and the watchdog's next renewal comes a third of it
// later, not a third of the old TTL later: after a long lease is cut to
// keepAliveTTL, the key must still hold the token over three of them.
func TestWatchdogFollowsAShorterExtend(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("cut")
	l, err := lk.Obtain(ctx, key, 30*keepAliveTTL, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, keepAliveTTL); err != nil {
		t.Fatal(err)
	}
	keptAlive(t, l, 3*keepAliveTTL, tokenAt(rdb, key, l.Token()))
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestLossDetectedWithinOneTTL(t *testing.T) {
	const ttl = keepAliveTTL // load cannot end the lease before the fault
	faults := map[string]func(ctx context.Context, rdb *redis.Client, key string) error{
		"key deleted": func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.Del(ctx, key).Err()
		},
		"key overwritten": func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.Set(ctx, key, "intruder", time.Minute).Err()
		},
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			srv, rdb, lk := setup(t)
			ctx := context.Background()
			key := srv.Key("victim")
			l, err := lk.Obtain(ctx, key, ttl, locking.WithWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			time.Sleep(ttl / 2) // a renewal or so has happened
			if err := l.Context().Err(); err != nil {
				t.Fatalf("lease ended before the fault: %v", context.Cause(l.Context()))
			}
			if err := fault(ctx, rdb, key); err != nil {
				t.Fatal(err)
			}
			// A renewal that Redis confirmed before the fault was sent
			// before the fault call returned.
			lossWithin(t, l, time.Now(), ttl)
			if got := rdb.Get(ctx, key).Val(); name == "key overwritten" && got != "intruder" {
				t.Fatalf("the lost lease touched the new owner's key: %q", got)
			}
		})
	}
}

// TestLossDetectedWhenServerPaused freezes Redis past the TTL. The watchdog's
// renewal hangs; the lease must still end on time, whatever the client's socket
// timeouts, so it runs with go-redis defaults (3s read timeout, context
// deadlines not applied to the socket) as well as with the test options.
func TestLossDetectedWhenServerPaused(t *testing.T) {
	const ttl = keepAliveTTL // load cannot end the lease before the pause
	clients := map[string]func(*redistest.Server) *redis.Client{
		"context deadlines on the socket": func(s *redistest.Server) *redis.Client { return s.Client() },
		"go-redis defaults": func(s *redistest.Server) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: s.Addr()})
		},
	}
	for name, newClient := range clients {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartOwned(t)
			rdb := newClient(srv)
			defer rdb.Close()
			lk := locking.New(rdb)
			ctx := context.Background()
			l, err := lk.Obtain(ctx, "paused", ttl, locking.WithWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(ttl / 2)
			if err := l.Context().Err(); err != nil {
				t.Fatalf("lease ended before the pause: %v", context.Cause(l.Context()))
			}
			srv.Pause()
			// The last renewal Redis confirmed was sent before it stopped,
			// so before Pause returned.
			lossWithin(t, l, time.Now(), ttl)
			srv.Resume()
			if err := l.Release(ctx); err != nil && !errors.Is(err, locking.ErrNotHeld) {
				t.Fatalf("Release after loss: %v", err)
			}
		})
	}
}

func TestNoWatchdogMeansTheLeaseEndsWithItsTTL(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	const ttl = 100 * time.Millisecond
	before := time.Now()
	l, err := lk.Obtain(ctx, srv.Key("short"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	// The lease counts its TTL from when Obtain sent its request: after
	// before, and before Obtain returned.
	obtained := time.Now()
	lossWithin(t, l, obtained, ttl)
	if took := time.Since(before); took < ttl*9/10 {
		t.Fatalf("lease ended after %v, before its TTL of %v", took, ttl)
	}
	// The lease ends locally a drift margin before Redis expires the key; once
	// Redis has expired it too (it set the TTL before Obtain returned),
	// Release finds nothing of its own.
	time.Sleep(time.Until(obtained.Add(ttl + 20*time.Millisecond)))
	if err := l.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("Release of an expired lease: %v, want ErrNotHeld", err)
	}
}

func TestKeepAliveStartsOneWatchdog(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("keepalive")
	l, err := lk.Obtain(ctx, key, keepAliveTTL)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.KeepAlive(); err != nil {
			t.Fatal(err)
		}
	}
	keptAlive(t, l, 2*keepAliveTTL, tokenAt(rdb, key, l.Token()))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// goleak in TestMain fails the package if a second watchdog outlived Release.
}

// TestExtendWaitsForTheWatchdogsRenewal: the watchdog's renewal (3s) has run
// in Redis and its answer is on its way when the owner calls Extend(200ms).
// Redis keeps the TTL of the renewal it ran last, and the lease takes the
// last answer it gets, so the Extend must wait for that answer and go after
// it. Sent at once, the Extend ran second in Redis, while the watchdog's late
// answer moved the deadline to 3s after its send: when the network then
// failed, another client took the expired key while the lease was still
// proven for seconds.
//
// The test holds the watchdog's answer until the Extend has run in Redis
// (the race) or waits on its context (its turn), so the order is the test's,
// not the scheduler's.
func TestExtendWaitsForTheWatchdogsRenewal(t *testing.T) {
	srv, rdb, lk := setup(t)
	key := srv.Key("turns")
	const ttl, shorter = 3 * time.Second, 200 * time.Millisecond
	tap := newRenewalTap(ttl)
	rdb.AddHook(tap)
	l, err := lk.Obtain(context.Background(), key, ttl, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background()) // fails on the cut network; the key has expired
	<-tap.held                            // after TTL/3: the watchdog's renewal has run; its answer is held

	ctx := &doneWatch{Context: context.WithValue(context.Background(), extendCall{}, true), tap: tap, waiting: make(chan struct{})}
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, shorter) }()
	select {
	case <-tap.overlapped:
		// Sent at once: let it finish first, as a slow answer would.
		err = <-extended
		close(tap.release)
	case <-ctx.waiting:
		close(tap.release)
		err = <-extended
	}
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if tap.overlap.Load() {
		t.Error("Extend was sent while the watchdog's renewal was waiting for its answer")
	}
	// Every renewal after the Extend's fails, as on a cut network. Once the
	// watchdog has tried one, it has applied the answer it was waiting for.
	select {
	case <-tap.cutOff:
	case <-l.Done():
	}

	// Another client takes the key when Redis has expired it.
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other, err := locking.New(srv.Client()).Lock(wctx, key, time.Second)
	if err != nil {
		t.Fatalf("the key never expired: %v", err)
	}
	taken := time.Now()
	defer other.Release(context.Background())
	if d := l.Deadline(); d.After(taken) {
		t.Errorf("two holders: another client took the key, but the lease stays proven for %v more "+
			"(the watchdog's late answer overrode the later Extend)", d.Sub(taken).Round(time.Millisecond))
	}
}

// TestExtendWaitingForItsTurnEndsWithItsContext: an Extend that waits for the
// watchdog's renewal to be answered gives up when its context ends, sends
// nothing, and leaves the turn free for the next one.
func TestExtendWaitingForItsTurnEndsWithItsContext(t *testing.T) {
	srv, rdb, lk := setup(t)
	key := srv.Key("cancelled")
	const ttl = 3 * time.Second
	tap := newRenewalTap(ttl)
	rdb.AddHook(tap)
	l, err := lk.Obtain(context.Background(), key, ttl, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	<-tap.held

	cctx, cancel := context.WithCancel(context.WithValue(context.Background(), extendCall{}, true))
	ctx := &doneWatch{Context: cctx, tap: tap, waiting: make(chan struct{})}
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, time.Second) }()
	select {
	case <-tap.overlapped:
		t.Error("Extend was sent while the watchdog's renewal was waiting for its answer")
	case <-ctx.waiting:
	}
	cancel()
	select {
	case err = <-extended:
		close(tap.release)
	case <-l.Done(): // the lease has run out with the answer still held
		close(tap.release)
		t.Fatalf("Extend waited for the watchdog's answer after its context ended: %v", <-extended)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Extend whose context ended while it waited: %v, want context.Canceled", err)
	}
	if err := l.Extend(context.Background(), ttl); err != nil {
		t.Fatalf("Extend after one gave up: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// processOnly is the rest of a go-redis hook that acts on single commands
// only (ProcessHook): dials and pipelines pass through.
type processOnly struct{}

func (processOnly) DialHook(next redis.DialHook) redis.DialHook { return next }
func (processOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// extendCall marks the context of the test's Extend.
type extendCall struct{}

// renewalTap is a hook on the lease's client. It holds the answer of the
// first renewal for ttl (the watchdog's) until release is closed, reports a
// renewal sent while another is in flight, and cuts the network once the
// test's Extend has run.
type renewalTap struct {
	processOnly
	ttlMs      int64
	hold       sync.Once
	held       chan struct{} // the held renewal has run in Redis
	release    chan struct{}
	inFlight   atomic.Int32
	extendSent atomic.Bool
	overlap    atomic.Bool
	overlapped chan struct{}
	cut        atomic.Bool
	cutOnce    sync.Once
	cutOff     chan struct{} // a renewal has met the cut
}

func newRenewalTap(ttl time.Duration) *renewalTap {
	return &renewalTap{ttlMs: ttl.Milliseconds(), held: make(chan struct{}), release: make(chan struct{}),
		overlapped: make(chan struct{}), cutOff: make(chan struct{})}
}

func (h *renewalTap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		ms, renewal := args[len(args)-1].(int64)
		renewal = renewal && len(args) == 6 // EVAL(SHA) extend 1 key token ttl
		if h.cut.Load() {
			if renewal {
				h.cutOnce.Do(func() { close(h.cutOff) })
			}
			err := errors.New("renewalTap: network cut")
			cmd.SetErr(err)
			return err
		}
		if !renewal {
			return next(ctx, cmd)
		}
		extend := ctx.Value(extendCall{}) != nil
		if extend {
			h.extendSent.Store(true)
		}
		if h.inFlight.Add(1) > 1 && h.overlap.CompareAndSwap(false, true) && extend {
			close(h.overlapped)
		}
		defer h.inFlight.Add(-1)
		err := next(ctx, cmd)
		if err != nil {
			return err
		}
		if extend {
			h.cut.Store(true)
		}
		if ms == h.ttlMs && !extend {
			hold := false
			h.hold.Do(func() { hold = true })
			if hold {
				close(h.held)
				<-h.release
			}
		}
		return nil
	}
}

// doneWatch is the test Extend's context. Asked for Done before its request
// has reached the client, it reports that the Extend waits rather than sends.
type doneWatch struct {
	context.Context
	tap     *renewalTap
	once    sync.Once
	waiting chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	if !c.tap.extendSent.Load() {
		c.once.Do(func() { close(c.waiting) })
	}
	return c.Context.Done()
}

// loseExtendReply runs the commands of a context marked extendCall in
// Redis and loses their answers: a reply lost on the network.
type loseExtendReply struct{ processOnly }

func (loseExtendReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && ctx.Value(extendCall{}) != nil {
			err = errors.New("loseExtendReply: i/o timeout (the reply was lost)")
			cmd.SetErr(err)
		}
		return err
	}
}

// TestAnExtendWithNoAnswerShortensTheLease: an Extend to a shorter TTL whose
// answer is lost may have run in Redis. Without a watchdog, the lease's proof
// of ownership must then end by the shorter TTL, as a confirmed Extend's
// would, and the key must not expire before it (an Extend never lowers the
// key's TTL: TestALateShorterExtendCutsNoTTL); with one, the watchdog must
// renew before the shorter TTL runs out.
func TestAnExtendWithNoAnswerShortensTheLease(t *testing.T) {
	for _, watchdog := range []bool{false, true} {
		t.Run(fmt.Sprintf("watchdog=%v", watchdog), func(t *testing.T) {
			srv, rdb, lk := setup(t)
			rdb.AddHook(loseExtendReply{})
			ctx := context.Background()
			key := srv.Key("unsure")
			var opts []locking.Option
			if watchdog {
				opts = append(opts, locking.WithWatchdog())
			}
			l, err := lk.Obtain(ctx, key, 30*keepAliveTTL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			if err := l.Extend(context.WithValue(ctx, extendCall{}, true), keepAliveTTL); err == nil {
				t.Fatal("Extend with its answer lost returned nil")
			}
			if watchdog {
				keptAlive(t, l, 3*keepAliveTTL, tokenAt(rdb, key, l.Token()))
				return
			}
			if after := time.Now(); l.Deadline().After(after.Add(keepAliveTTL)) {
				t.Fatalf("the lease counts on %v past the unanswered Extend's TTL", l.Deadline().Sub(after.Add(keepAliveTTL)).Round(time.Millisecond))
			}
			left, err := rdb.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if expiry := time.Now().Add(left); expiry.Before(l.Deadline()) {
				t.Fatalf("Redis expires the key %v before the lease's Deadline", l.Deadline().Sub(expiry).Round(time.Millisecond))
			}
		})
	}
}

// planHook delays, and may fail, the renewals (extend script calls) sent
// once armed, by the order they are sent in: plan(n) for the nth.
type planHook struct {
	processOnly
	armed atomic.Bool
	n     atomic.Int32
	plan  func(n int) (delay time.Duration, fail bool)
}

func (h *planHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		_, ms := args[len(args)-1].(int64)
		if !h.armed.Load() || !ms || len(args) != 6 { // EVAL(SHA) extend 1 key token ttl
			return next(ctx, cmd)
		}
		delay, fail := h.plan(int(h.n.Add(1) - 1))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		if fail {
			err := errors.New("planHook: i/o timeout")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// plannedLease obtains a lease on key name with a watchdog, and plans its
// renewals (the extend script's calls) from the first sent after it returns:
// Redis has the script by then (an Extend loaded it), so each is one call.
// The lease is released when the test ends.
func plannedLease(t *testing.T, name string, ttl time.Duration, plan func(n int) (time.Duration, bool)) (*redis.Client, string, *locking.Lease, *planHook) {
	t.Helper()
	srv, rdb, lk := setup(t)
	h := &planHook{plan: plan}
	rdb.AddHook(h)
	ctx := context.Background()
	key := srv.Key(name)
	l, err := lk.Obtain(ctx, key, ttl, locking.WithWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	return rdb, key, l, h
}

// TestARenewalRetryIsNotPutOffByAnExtend: the watchdog's timer fires while
// an Extend is in flight; the watchdog renews after it, and that renewal
// fails on the network. Its retry is due a tenth of the TTL later, before
// the lease runs out, and the Extend's signal to re-arm the timer (for a
// third of the TTL) must not put it off past that: Redis answers again by
// then, so the lease must live.
func TestARenewalRetryIsNotPutOffByAnExtend(t *testing.T) {
	const ttl = 6 * keepAliveTTL // renewals due every 2s; a retry 0.3 to 0.6s after a failure
	_, _, l, _ := plannedLease(t, "retry", ttl, func(n int) (time.Duration, bool) {
		switch n {
		case 0: // the Extend at 1s: answered at 2.5s, after the watchdog's timer (2s)
			return ttl / 4, false
		case 1: // the watchdog's renewal at 2.5s fails at 5.5s; its retry is due by 6.1s
			return ttl / 2, true
		}
		return 0, false
	})
	time.Sleep(ttl / 6)
	if err := l.Extend(context.Background(), ttl); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done(): // without the retry, at about 6.9s
		t.Fatalf("lease lost though Redis answered again after the failed renewal: %v", context.Cause(l.Context()))
	case <-time.After(ttl + ttl/2):
	}
}

// TestARenewalRetryFollowsAnUnsureExtend: an Extend to a short TTL gets no
// answer, so the lease counts on that TTL; the watchdog's next renewal then
// fails on the network too. Its retry must come within the short TTL (a
// tenth of it), not a tenth of the long one, which would be after the lease
// ran out: Redis answers the retry, so the lease must live.
func TestARenewalRetryFollowsAnUnsureExtend(t *testing.T) {
	const long, short = 60 * keepAliveTTL, 2 * keepAliveTTL // a retry 3 to 6s after a failure, against 0.1 to 0.2s
	rdb, key, l, h := plannedLease(t, "unsure-retry", long, func(n int) (time.Duration, bool) {
		return 0, n < 2 // the Extend, then the watchdog's renewal at 0.67s
	})
	if err := l.Extend(context.Background(), short); err == nil {
		t.Fatal("Extend with no answer returned nil")
	}
	keptAlive(t, l, 2*short, tokenAt(rdb, key, l.Token()))
	if n := h.n.Load(); n < 3 {
		t.Fatalf("%d extend calls; want the Extend, the failed renewal and its retry", n)
	}
}

// TestReleaseDoesNotWaitOutARenewal: Release is called while the watchdog's
// renewal hangs (Redis gets it, but no answer comes back). The renewal may
// wait until the lease would run out; Release must not wait with it: it
// stops the renewal and releases (both are token-checked, so their order in
// Redis does not matter).
func TestReleaseDoesNotWaitOutARenewal(t *testing.T) {
	const ttl = 6 * keepAliveTTL // the renewal at 2s may hang until 6s
	sent := make(chan struct{}, 1)
	rdb, key, l, _ := plannedLease(t, "release-hang", ttl, func(int) (time.Duration, bool) {
		sent <- struct{}{}
		return time.Hour, true // until the call's context ends
	})
	ctx := context.Background()
	<-sent
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if took := time.Since(start); took > ttl/4 {
		t.Fatalf("Release took %v: it waited for the hung renewal", took.Round(time.Millisecond))
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the key is still there after Release")
	}
}

package locking_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotcron/slotcron/locking"
)

func TestRWTwentyConcurrentReaders(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	rw := lk.RWMutex(srv.Key("rw-readers"))
	const n = 20
	var (
		wg      sync.WaitGroup
		holding atomic.Int32
		peak    atomic.Int32
		leases  = make(chan *locking.Lease, n)
		errs    = make(chan error, n)
		start   = make(chan struct{})
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := rw.TryRLock(ctx, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if v := holding.Add(1); v > peak.Load() {
				peak.Store(v)
			}
			leases <- l
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	close(leases)
	for err := range errs {
		t.Errorf("reader refused: %v", err)
	}
	if got := rdb.HLen(ctx, srv.Key("rw-readers")).Val(); got != n {
		t.Fatalf("%d reader fields, want %d", got, n)
	}
	if peak.Load() != n {
		t.Fatalf("peak concurrent readers %d, want %d", peak.Load(), n)
	}
	for l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if rdb.Exists(ctx, srv.Key("rw-readers")).Val() != 0 {
		t.Fatal("hash survived the last reader")
	}
}

func TestRWWriterExcludesReadersAndWriters(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	rw := lk.RWMutex(srv.Key("rw-writer"))
	w, err := rw.TryLock(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.TryRLock(ctx, time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("reader under a writer: %v", err)
	}
	if _, err := rw.TryLock(ctx, time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("second writer: %v", err)
	}
	// A blocked reader wakes when the writer releases: with a backoff of
	// 5s..10s, before its own timer could fire (2.5s after it started).
	const minBackoff, maxBackoff = 5 * time.Second, 10 * time.Second
	got := make(chan error, 1)
	launched := time.Now()
	go func() {
		l, err := rw.RLock(ctx, time.Second, locking.WithBackoff(minBackoff, maxBackoff))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	w.Release(ctx)
	if err := before(t, got, launched.Add(minBackoff/2), "the reader was not woken by the writer's release before its backoff could fire"); err != nil {
		t.Fatal(err)
	}
	t.Logf("reader woke %v after the writer's release", time.Since(released).Round(time.Microsecond))
}

func TestRWReadersExcludeWriter(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	rw := lk.RWMutex(srv.Key("rw-excl"))
	r1, _ := rw.TryRLock(ctx, 5*time.Second)
	r2, err := rw.TryRLock(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.TryLock(ctx, time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("writer under readers: %v", err)
	}
	r1.Release(ctx)
	if _, err := rw.TryLock(ctx, time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("writer under one reader: %v", err)
	}
	r2.Release(ctx)
	w, err := rw.TryLock(ctx, time.Second)
	if err != nil {
		t.Fatalf("writer after the readers left: %v", err)
	}
	w.Release(ctx)
}

func TestRWReaderCannotTouchAnotherReader(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("rw-own")
	rw := lk.RWMutex(key)
	// b's TTL is long enough to outlast the calls below on a loaded machine,
	// and short next to the minute a's Extend asks for.
	const bTTL = 2 * time.Second
	a, _ := rw.TryRLock(ctx, 5*time.Second)
	b, err := rw.TryRLock(ctx, bTTL)
	if err != nil {
		t.Fatal(err)
	}
	// a releases twice and extends: b's hold is untouched.
	a.Release(ctx)
	a.Release(ctx)
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("extend of a released read hold: %v", err)
	}
	fields := rdb.HKeys(ctx, key).Val()
	if len(fields) != 1 || fields[0] != "r:"+b.Token() {
		t.Fatalf("fields after a's release: %v, want only b's", fields)
	}
	if ttl, err := b.TTL(ctx); err != nil || ttl > bTTL {
		t.Fatalf("b's TTL = %v, %v: a's Extend reached it", ttl, err)
	}
	b.Release(ctx)
}

func TestRWExpiredReaderDoesNotBlockWriter(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	rw := lk.RWMutex(srv.Key("rw-expired"))
	if _, err := rw.TryRLock(ctx, 100*time.Millisecond); err != nil { // a reader that dies
		t.Fatal(err)
	}
	// A writer whose wait is not capped by the reader's expiry sleeps its
	// backoff: at least 2.5s from the start.
	const minBackoff, maxBackoff = 5 * time.Second, 10 * time.Second
	start := time.Now()
	got := make(chan *locking.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		w, err := rw.Lock(ctx, time.Second, locking.WithBackoff(minBackoff, maxBackoff))
		got <- w
		errc <- err
	}()
	if err := before(t, errc, start.Add(minBackoff/2), "the writer did not get in before its backoff could fire: its wait is not capped by the expiry of a reader that died after 100ms"); err != nil {
		t.Fatal(err)
	}
	w := <-got
	defer w.Release(ctx)
	t.Logf("writer got in after %v", time.Since(start).Round(time.Millisecond))
}

// The reader stream holds each read for streamHold and starts one every
// streamHold/10, so about ten overlap: it has a gap, which would let any
// writer in, only if this process stalls for most of a hold.
const streamHold = 500 * time.Millisecond

// starveWindow is how long TestRWPreferReadersStarvesWriter shows that the
// stream keeps a reader-preferring writer out. A writer-preferring one must
// get in within it: it waits only for the readers inside to leave (one
// streamHold), and the window leaves as much again several times over for a
// loaded machine.
const starveWindow = 4 * streamHold

// readerStream keeps readers overlapping on rw: each holds for hold and a new
// one starts every hold/10, until stop closes. It returns how many reads ran.
func readerStream(t *testing.T, rw *locking.RWMutex, hold time.Duration, stop <-chan struct{}) (wait func() int) {
	var (
		wg    sync.WaitGroup
		reads atomic.Int32
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(hold / 10)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					select {
					case <-stop:
						cancel()
					case <-ctx.Done():
					}
				}()
				l, err := rw.RLock(ctx, 5*time.Second)
				if err != nil {
					return // stopped while queued behind the writer
				}
				reads.Add(1)
				time.Sleep(hold)
				l.Release(context.Background())
			}()
		}
	}()
	return func() int { wg.Wait(); return int(reads.Load()) }
}

// TestRWWaitingWriterIsNotStarved: a stream of overlapping readers, so that
// at every moment several are reading. A writer that waits blocks new
// readers, so it gets in once the readers already inside leave, well within
// the window in which the same stream keeps a reader-preferring writer out.
func TestRWWaitingWriterIsNotStarved(t *testing.T) {
	srv, _, lk := setup(t)
	rw := lk.RWMutex(srv.Key("rw-starve"))
	stop := make(chan struct{})
	wait := readerStream(t, rw, streamHold, stop)
	time.Sleep(streamHold) // the stream is flowing: about ten readers overlap

	ctx, cancel := context.WithTimeout(context.Background(), starveWindow)
	defer cancel()
	start := time.Now()
	w, err := rw.Lock(ctx, 5*time.Second)
	took := time.Since(start)
	close(stop)
	if errors.Is(err, context.DeadlineExceeded) {
		wait()
		t.Fatalf("writer starved for %v under a reader stream", starveWindow)
	}
	if err != nil {
		t.Fatal(err)
	}
	w.Release(context.Background())
	reads := wait()
	t.Logf("writer got in after %v; %d reads ran", took.Round(time.Millisecond), reads)
	if reads < 3 {
		t.Fatalf("only %d reads ran: the stream never held the lock", reads)
	}
}

// TestRWPreferReadersStarvesWriter is the contrast: with PreferReaders the same
// stream keeps the writer out for the whole window, which shows the bound
// above is earned.
func TestRWPreferReadersStarvesWriter(t *testing.T) {
	srv, _, lk := setup(t)
	rw := lk.RWMutex(srv.Key("rw-prefer"), locking.PreferReaders())
	stop := make(chan struct{})
	wait := readerStream(t, rw, streamHold, stop)
	time.Sleep(streamHold)

	ctx, cancel := context.WithTimeout(context.Background(), starveWindow)
	defer cancel()
	w, err := rw.Lock(ctx, 5*time.Second)
	close(stop)
	wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		if w != nil {
			w.Release(context.Background())
		}
		t.Fatalf("writer under PreferReaders: %v, want starvation until the %v deadline", err, starveWindow)
	}
}

func TestRWCancelledWriterWithdrawsItsMark(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("rw-withdraw")
	rw := lk.RWMutex(key)
	r, err := rw.TryRLock(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := rw.Lock(wctx, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer: %v", err)
	}
	for _, f := range rdb.HKeys(ctx, key).Val() {
		if f[0] == 'q' {
			t.Fatalf("waiting mark %q left behind", f)
		}
	}
	// New readers get in at once.
	r2, err := rw.TryRLock(ctx, time.Second)
	if err != nil {
		t.Fatalf("reader after the writer gave up: %v", err)
	}
	r2.Release(ctx)
}

// TestRWReleaseOfALostHoldIsNotHeld: a hold that Redis no longer has (the
// key lost in a failover, or the hold lapsed while its process was paused)
// is not released as if it had been held to the end: Release says
// ErrNotHeld, its lease ends lost, and another holder keeps its hold.
func TestRWReleaseOfALostHoldIsNotHeld(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	lost := func(t *testing.T, l *locking.Lease) {
		t.Helper()
		if err := l.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
			t.Fatalf("Release of a lost hold: %v, want ErrNotHeld", err)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, locking.ErrLeaseLost) {
			t.Fatalf("the lease's cause after the release of a lost hold: %v, want ErrLeaseLost", cause)
		}
	}
	for _, kind := range []string{"reader", "writer"} {
		t.Run(kind+", its key lost, another writer in", func(t *testing.T) {
			key := srv.Key("rw-lost-" + kind)
			rw := lk.RWMutex(key)
			take := rw.TryRLock
			if kind == "writer" {
				take = rw.TryLock
			}
			l, err := take(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			rdb.Del(ctx, key)
			w, err := rw.TryLock(ctx, time.Minute)
			if err != nil {
				t.Fatalf("a writer after the key was lost: %v", err)
			}
			lost(t, l)
			if !rdb.HExists(ctx, key, "w:"+w.Token()).Val() {
				t.Fatalf("the lost hold's Release took the new writer's hold: %v", rdb.HKeys(ctx, key).Val())
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("reader, its hold lapsed beside another reader", func(t *testing.T) {
		key := srv.Key("rw-lapsed")
		rw := lk.RWMutex(key)
		a, err := rw.TryRLock(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b, err := rw.TryRLock(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rdb.HSet(ctx, key, "r:"+a.Token(), 1) // a's hold lapsed on Redis's clock; b's did not
		lost(t, a)
		if !rdb.HExists(ctx, key, "r:"+b.Token()).Val() {
			t.Fatalf("a's Release took b's hold: %v", rdb.HKeys(ctx, key).Val())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

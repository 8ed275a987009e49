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
	// A blocked reader wakes when the writer releases.
	got := make(chan error, 1)
	go func() {
		l, err := rw.RLock(ctx, time.Second, locking.WithBackoff(time.Second, 2*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	w.Release(ctx)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(released); d > 200*time.Millisecond {
		t.Fatalf("reader took %v to wake after the writer's release", d)
	}
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
	a, _ := rw.TryRLock(ctx, 5*time.Second)
	b, err := rw.TryRLock(ctx, 300*time.Millisecond)
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
	if ttl, err := b.TTL(ctx); err != nil || ttl > 300*time.Millisecond {
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
	start := time.Now()
	w, err := rw.Lock(ctx, time.Second, locking.WithBackoff(5*time.Second, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("writer waited %v for a reader that expired after 100ms", d)
	}
}

// readerStream keeps readers overlapping on rw: each holds for hold and a new
// one starts every hold/2, until stop closes. It returns how many reads ran.
func readerStream(t *testing.T, rw *locking.RWMutex, hold time.Duration, stop <-chan struct{}) (wait func() int) {
	var (
		wg    sync.WaitGroup
		reads atomic.Int32
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(hold / 2)
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

// TestRWWaitingWriterIsNotStarved: readers arrive every 25ms and each holds
// 50ms, so at every moment one is reading. A writer that waits blocks new
// readers, so it gets in once the readers already inside leave: within one
// reader hold (50ms) plus a 200ms allowance for wake-up and scheduling.
func TestRWWaitingWriterIsNotStarved(t *testing.T) {
	const hold, bound = 50 * time.Millisecond, 250 * time.Millisecond
	srv, _, lk := setup(t)
	rw := lk.RWMutex(srv.Key("rw-starve"))
	stop := make(chan struct{})
	wait := readerStream(t, rw, hold, stop)
	time.Sleep(4 * hold) // the stream is flowing

	start := time.Now()
	w, err := rw.Lock(context.Background(), 5*time.Second)
	took := time.Since(start)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	w.Release(context.Background())
	reads := wait()
	t.Logf("writer got in after %v; %d reads ran", took.Round(time.Millisecond), reads)
	if reads < 3 {
		t.Fatalf("only %d reads ran: the stream never held the lock", reads)
	}
	if took > bound {
		t.Fatalf("writer waited %v under a reader stream, bound %v", took, bound)
	}
}

// TestRWPreferReadersStarvesWriter is the contrast: with PreferReaders the same
// stream keeps the writer out, which shows the bound above is earned.
func TestRWPreferReadersStarvesWriter(t *testing.T) {
	const hold = 50 * time.Millisecond
	srv, _, lk := setup(t)
	rw := lk.RWMutex(srv.Key("rw-prefer"), locking.PreferReaders())
	stop := make(chan struct{})
	wait := readerStream(t, rw, hold, stop)
	time.Sleep(4 * hold)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := rw.Lock(ctx, 5*time.Second)
	close(stop)
	wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer under PreferReaders: %v, want starvation until the 1s deadline", err)
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

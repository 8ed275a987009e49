package locking_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

func setup(t *testing.T) (*redistest.Server, *redis.Client, *locking.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	return srv, rdb, locking.New(rdb)
}

func TestHundredGoroutinesOneWinner(t *testing.T) {
	srv, _, lk := setup(t)
	key := srv.Key("race")
	const n = 100
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		won      atomic.Int32
		lost     atomic.Int32
		failures = make(chan error, n)
		leases   = make(chan *locking.Lease, n)
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := lk.Obtain(context.Background(), key, 10*time.Second)
			switch {
			case err == nil:
				won.Add(1)
				leases <- l
			case errors.Is(err, locking.ErrNotObtained):
				lost.Add(1)
			default:
				failures <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(failures)
	close(leases)
	for err := range failures {
		t.Errorf("Obtain failed: %v", err)
	}
	if won.Load() != 1 || lost.Load() != n-1 {
		t.Fatalf("won %d, lost %d; want 1 and %d", won.Load(), lost.Load(), n-1)
	}
	for l := range leases {
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func TestForeignTokenCannotReleaseOrExtend(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("owned")
	owner, err := lk.Obtain(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Release(ctx)

	if _, err := lk.Obtain(ctx, key, 5*time.Second); !errors.Is(err, locking.ErrNotObtained) {
		t.Fatalf("second Obtain on a held key: %v, want ErrNotObtained", err)
	}

	// Overwrite the owner's key with a foreign token: the owner can no longer
	// extend or release it, and the foreign value stays.
	if err := rdb.Set(ctx, key, "someone-else", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := owner.Extend(ctx, 10*time.Second); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("Extend of a foreign key: %v, want ErrNotHeld", err)
	}
	if err := owner.Release(ctx); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("Release of a foreign key: %v, want ErrNotHeld", err)
	}
	if got := rdb.Get(ctx, key).Val(); got != "someone-else" {
		t.Fatalf("the foreign value was changed to %q", got)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl > 5*time.Second {
		t.Fatalf("the foreign key's TTL was extended to %v", ttl)
	}
}

func TestReleaseIsIdempotentAndFreesTheKey(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("idem")
	l, err := lk.Obtain(ctx, key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Token()) != 22 {
		t.Fatalf("token %q is not 128 bits in base64url", l.Token())
	}
	for i := range 3 {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("key still exists after Release")
	}
	if !errors.Is(context.Cause(l.Context()), context.Canceled) {
		t.Fatalf("cause after Release = %v, want context.Canceled", context.Cause(l.Context()))
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("Extend after Release: %v, want ErrNotHeld", err)
	}
	if err := l.KeepAlive(); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("KeepAlive after Release: %v, want ErrNotHeld", err)
	}
	// The key is free again.
	l2, err := lk.Obtain(ctx, key, time.Second)
	if err != nil {
		t.Fatalf("Obtain after Release: %v", err)
	}
	l2.Release(ctx)
}

func TestReleaseWorksOnCancelledContext(t *testing.T) {
	srv, rdb, lk := setup(t)
	key := srv.Key("shutdown")
	l, err := lk.Obtain(context.Background(), key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as during a shutdown
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release on a cancelled context: %v", err)
	}
	if n := rdb.Exists(context.Background(), key).Val(); n != 0 {
		t.Fatal("key survived a Release on a cancelled context")
	}
}

func TestExtendAndTTL(t *testing.T) {
	srv, _, lk := setup(t)
	ctx := context.Background()
	// The first TTL outlasts the calls before Extend on a loaded machine.
	const first = time.Second
	l, err := lk.Obtain(ctx, srv.Key("ttl"), first)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ttl, err := l.TTL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > first {
		t.Fatalf("TTL = %v, want in (0, %v]", ttl, first)
	}
	before := l.Deadline()
	extending := time.Now()
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, _ = l.TTL(ctx); ttl < 4*time.Second {
		t.Fatalf("TTL after Extend(5s) = %v", ttl)
	}
	if !l.Deadline().After(extending.Add(4 * time.Second)) {
		t.Fatalf("Deadline moved from %v to %v only", before, l.Deadline())
	}
	// Past the first deadline, the lease is still held: Extend moved the
	// local timer too. A timer left at the first deadline has fired by the
	// time a reference timer due grace later has, and its goroutine has run.
	time.Sleep(time.Until(before.Add(grace)))
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lease ended after Extend: %v", context.Cause(l.Context()))
	}
}

func TestFencingGrowsPerKey(t *testing.T) {
	srv, rdb, lk := setup(t)
	ctx := context.Background()
	key := srv.Key("fenced")
	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 5 {
		l, err := lk.Obtain(ctx, key, time.Second, locking.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("claim %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// At least Redis's clock in µs when it was taken (TestFenceGrowsAfterRedisLosesData).
	if last < before.UnixMicro() {
		t.Fatalf("fence after 5 claims = %d, below Redis's clock in µs before the first (%d)", last, before.UnixMicro())
	}
	plain, err := lk.Obtain(ctx, key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)
	if plain.Fence() != 0 {
		t.Fatalf("fence without WithFencing = %d, want 0", plain.Fence())
	}
}

func TestBadArguments(t *testing.T) {
	_, _, lk := setup(t)
	ctx := context.Background()
	tests := []struct {
		name string
		key  string
		ttl  time.Duration
		opts []locking.Option
		is   error
	}{
		{"empty key", "", time.Second, nil, locking.ErrInvalidKey},
		{"ttl too short", "k", time.Millisecond, nil, nil},
		{"negative ttl", "k", -time.Second, nil, nil},
		{"fencing on an untaggable key", "a}b", time.Second, []locking.Option{locking.WithFencing()}, locking.ErrInvalidKey},
		{"bad backoff", "k", time.Second, []locking.Option{locking.WithBackoff(time.Second, time.Millisecond)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lk.Obtain(ctx, tt.key, tt.ttl, tt.opts...)
			if err == nil {
				t.Fatal("Obtain accepted bad arguments")
			}
			if errors.Is(err, locking.ErrNotObtained) {
				t.Fatalf("bad arguments reported as a lost race: %v", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v is not %v", err, tt.is)
			}
		})
	}
}

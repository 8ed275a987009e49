package locking_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
)

// replyDropper is a TCP proxy in front of Redis. Once armed, it lets the next
// command that contains "EVALSHA" reach Redis, and then closes that client
// connection instead of forwarding the reply: the command ran, the client saw
// EOF (a reply lost on the network). go-redis retries on EOF (MaxRetries 3 by
// default), so the script runs a second time on a fresh connection.
type replyDropper struct {
	ln    net.Listener
	to    string
	armed atomic.Bool
	wg    sync.WaitGroup
}

func newReplyDropper(t *testing.T, to string) *replyDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, to: to}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *replyDropper) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		var drop atomic.Bool
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) && p.armed.CompareAndSwap(true, false) {
						drop.Store(true)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server -> client
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if drop.Load() {
						return // the reply is lost: close the client's connection
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if err != io.EOF {
						return
					}
					return
				}
			}
		}()
	}
}

// TestReentrantReleaseSentAgainGivesUpNoOtherHold: an owner has two holds;
// the reply to the first hold's Release is lost (EOF), and go-redis sends
// the unlock script again. The lock counted holds per owner, so the second
// run gave up the second hold too: the lock was deleted while that hold's
// Lease still reported it held, and another owner took it. Each hold now
// has a token of its own.
func TestReentrantReleaseSentAgainGivesUpNoOtherHold(t *testing.T) {
	srv, rdb, _ := setup(t)
	ctx := context.Background()
	p := newReplyDropper(t, srv.Addr())
	opts := srv.Options()
	opts.Addr = p.ln.Addr().String() // go-redis's default MaxRetries (3), as a user's client has
	prdb := redis.NewClient(opts)
	defer prdb.Close()
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
	p.armed.Store(true)
	err = h1.Release(ctx) // ErrNotHeld (its retry found it gone: the README's limits) or nil
	if p.armed.Load() {
		t.Fatal("the Release did not pass through the proxy: the test shows nothing")
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

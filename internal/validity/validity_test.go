package validity_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/internal/validity"
)

// ended waits for v's context to end, and returns how long after from it
// did, on synctest's clock, and its cause.
func ended(v *validity.Timer, from time.Time) (time.Duration, error) {
	<-v.Context().Done()
	return time.Since(from), context.Cause(v.Context())
}

// TestTimerEndsBeforeTheKeyCanExpire: ownership is proven for the TTL less
// a drift margin (1% + 2 ms), counted from when the request was sent, so
// the owner stops before Redis, whose clock may run a little fast, can let
// the key go.
func TestTimerEndsBeforeTheKeyCanExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sent := time.Now()
		time.Sleep(30 * time.Millisecond) // the reply takes this long
		v := validity.Start(context.Background(), sent, time.Second)
		after, cause := ended(v, sent)
		if want := time.Second - 10*time.Millisecond - 2*time.Millisecond; after != want {
			t.Fatalf("the timer of a 1s TTL ended %v after the send, want %v", after, want)
		}
		if !errors.Is(cause, validity.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", cause)
		}
	})
}

// TestExtendCountsFromTheSend: a confirmed renewal extends ownership from
// when it was sent, not from when its answer came: Redis may have run it as
// soon as it arrived.
func TestExtendCountsFromTheSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := validity.Start(context.Background(), time.Now(), time.Second)
		time.Sleep(300 * time.Millisecond)
		sent := time.Now()
		time.Sleep(200 * time.Millisecond) // a slow answer
		v.Extend(sent, time.Second)
		if after, _ := ended(v, sent); after != validity.SafeTTL(time.Second) {
			t.Fatalf("extended from a send 200ms before its answer: ended %v after the send, want %v", after, validity.SafeTTL(time.Second))
		}
	})
}

// TestShortenTakesAnUnansweredShorterTTL: a request that set a shorter TTL
// and got no answer may have run: ownership ends by that TTL, counted from
// its send. A longer one changes nothing.
func TestShortenTakesAnUnansweredShorterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		v := validity.Start(context.Background(), start, time.Second)
		time.Sleep(100 * time.Millisecond)
		v.Shorten(time.Now(), 10*time.Second) // later than the end: no change
		if want := start.Add(validity.SafeTTL(time.Second)); !v.Deadline().Equal(want) {
			t.Fatalf("an unanswered request with a longer TTL moved the end from %v to %v", want, v.Deadline())
		}
		sent := time.Now()
		v.Shorten(sent, 200*time.Millisecond)
		if after, _ := ended(v, sent); after != validity.SafeTTL(200*time.Millisecond) {
			t.Fatalf("shortened to 200ms: ended %v after that send, want %v", after, validity.SafeTTL(200*time.Millisecond))
		}
	})
}

// TestALostTimerStaysLost: a renewal confirmed after the time ran out does
// not move the deadline that logs and the renewer report (the context, once
// ended, stays ended).
func TestALostTimerStaysLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sent := time.Now()
		v := validity.Start(context.Background(), sent, 100*time.Millisecond)
		ended(v, sent)
		lost := v.Deadline()
		v.Extend(time.Now(), time.Second)
		if !v.Deadline().Equal(lost) {
			t.Fatalf("a late Extend moved the deadline of an ended timer from %v to %v", lost, v.Deadline())
		}
	})
}

// TestProvenDoesNotWaitForTheTimer: at the instant the time runs out, the
// timer's goroutine and the owner's wake together, and either may run
// first. Proven answers false then, with the context already ended, in
// every round; before, it is true, and Extend in time keeps it so.
func TestProvenDoesNotWaitForTheTimer(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			sent := time.Now()
			v := validity.Start(context.Background(), sent, time.Second)
			time.Sleep(validity.SafeTTL(time.Second) - time.Millisecond)
			if !v.Proven() {
				t.Fatal("not proven a millisecond before its end")
			}
			v.Extend(time.Now(), time.Second)
			time.Sleep(validity.SafeTTL(time.Second))
			if v.Proven() || v.Context().Err() == nil {
				t.Fatalf("at its end: proven %v, context %v", v.Proven(), v.Context().Err())
			}
			if !errors.Is(context.Cause(v.Context()), validity.ErrLeaseLost) {
				t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(v.Context()))
			}
		})
	}
}

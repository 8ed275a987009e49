package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slotstore"
)

// stopMidAdd is a go-redis hook that, once armed, ends the alert loop's
// context as its next command is sent, and fails that command as the
// context's end does: the stop lands while an event is being added.
type stopMidAdd struct {
	armed atomic.Bool
	stop  context.CancelFunc
}

func (h *stopMidAdd) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *stopMidAdd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			h.stop()
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return next(ctx, cmd)
	}
}
func (h *stopMidAdd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAnAlertCutOffByTheStopIsFlushed: the worker stops while its alert
// loop adds an event to the outbox. The loop logged the event lost and
// returned; flush, which runs next on a context of its own to add what is
// left, never saw it, and no metric counted it. Found by review.
func TestAnAlertCutOffByTheStopIsFlushed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store, err := slotstore.New(rdb, srv.Key("stop"))
	if err != nil {
		t.Fatal(err)
	}
	const url = "http://127.0.0.1:9/hook"
	a := &alerter{cfg: AlertsConfig{Webhooks: []string{url}, MaxAttempts: 3}, store: store, self: "r1",
		kinds: map[string]bool{"failed": true}, log: slog.New(slog.DiscardHandler), counter: noCounter,
		events: make(chan scheduler.Event, 1), wake: make(chan struct{}, 1)}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cut := &stopMidAdd{stop: stop}
	rdb.AddHook(cut)
	e := scheduler.Event{ID: "lottery/failed/1", Kind: scheduler.EventFailed, Job: "lottery", At: time.Now()}
	a.hook(e)
	cut.armed.Store(true)
	a.loop(ctx)
	if cut.armed.Load() {
		t.Fatal("the loop sent nothing: the test shows nothing")
	}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.flush(fctx)
	state, _, err := store.DeliveryState(fctx, deliveryID(e.ID, url))
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if state == "" {
		t.Errorf("the event the stop cut off is not in the outbox after flush: lost")
	}
}

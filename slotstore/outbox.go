package slotstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The alert outbox: deliveries of events to webhooks, kept in Redis so that
// each is sent by one replica at a time and, once delivered, never again,
// whichever replica restarts. All its keys share the hash tag {alerts}:
//
//	<prefix>:{alerts}:d:<id>     a delivery (hash)
//	<prefix>:{alerts}:pending    the pending deliveries, by when each is due
//
// A delivery's ID names the event and the webhook; see Outbox.Add.

// Delivery is a pending delivery that a sender holds (Outbox.Take).
type Delivery struct {
	ID       string
	Payload  string
	URL      string
	Attempts int // the attempts made before this one
}

// DeliveryResult is how an attempt ended (Outbox.Done).
type DeliveryResult string

// The ends of an attempt.
const (
	Delivered DeliveryResult = "delivered" // the webhook answered 2xx: never sent again
	Retry     DeliveryResult = "retry"     // send it again after a wait
	Failed    DeliveryResult = "failed"    // give up: never sent again
)

// outboxKeep is how long a delivery is kept, delivered or not: a replica
// that reports the same event later than this would send it again.
const outboxKeep = 7 * 24 * time.Hour

func (s *Store) deliveryKey(id string) string { return s.prefix + ":{alerts}:d:" + id }
func (s *Store) pendingKey() string           { return s.prefix + ":{alerts}:pending" }

func (s *Store) outbox(ctx context.Context, id string, args ...any) *redis.Cmd {
	return outboxScript.Run(ctx, s.rdb, []string{s.deliveryKey(id), s.pendingKey()}, append([]any{args[0], id}, args[1:]...)...)
}

// AddDelivery adds a delivery of payload to url under id, unless one with
// that ID exists (another replica reported the same event): only sender may
// take it for hold (0: any sender, now). It reports whether it was added.
func (s *Store) AddDelivery(ctx context.Context, id, sender, payload, url string, hold time.Duration) (bool, error) {
	n, err := s.outbox(ctx, id, "add", sender, payload, outboxKeep.Milliseconds(), url, hold.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("slotstore: adding alert delivery %s: %w", id, err)
	}
	return n == 1, nil
}

// DueDeliveries returns the IDs of at most n pending deliveries that are
// due now (on this process's clock; Take decides on Redis's).
func (s *Store) DueDeliveries(ctx context.Context, n int64) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmd := pipe.ZRangeByScore(ctx, s.pendingKey(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: n})
	_, err := pipe.Exec(ctx)
	ids := cmd.Val()
	if err != nil {
		return nil, fmt.Errorf("slotstore: reading due alert deliveries: %w", err)
	}
	return ids, nil
}

// TakeDelivery holds the delivery for sender for hold, so that no other
// sender sends it meanwhile; ok is false when it is not sender's to send
// (delivered, failed, gone, or held by another).
func (s *Store) TakeDelivery(ctx context.Context, id, sender string, hold time.Duration) (d Delivery, ok bool, err error) {
	vals, err := s.outbox(ctx, id, "take", sender, hold.Milliseconds()).Slice()
	if errors.Is(err, redis.Nil) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("slotstore: taking alert delivery %s: %w", id, err)
	}
	r := reply(vals)
	d = Delivery{ID: id, Payload: r.str(0), URL: r.str(1), Attempts: int(r.int(2))}
	if r.err != nil {
		return Delivery{}, false, fmt.Errorf("slotstore: taking alert delivery %s: %w in reply %v", id, r.err, vals)
	}
	return d, true, nil
}

// DeliveryDone settles an attempt that sender made: Delivered and Failed
// for good; Retry after wait, by sender alone until hold past that (then by
// anyone: sender may be gone). It reports false when sender no longer held
// the delivery.
func (s *Store) DeliveryDone(ctx context.Context, id, sender string, result DeliveryResult, wait, hold time.Duration, errText string) (bool, error) {
	n, err := s.outbox(ctx, id, "done", sender, string(result), wait.Milliseconds(), errText, hold.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("slotstore: settling alert delivery %s: %w", id, err)
	}
	return n == 1, nil
}

// DeliveryState returns a delivery's state ("pending", "delivered",
// "failed"; "" when there is none) and its attempts so far.
func (s *Store) DeliveryState(ctx context.Context, id string) (string, int, error) {
	pipe := s.rdb.Pipeline()
	cmd := pipe.HMGet(ctx, s.deliveryKey(id), "state", "attempts")
	_, err := pipe.Exec(ctx)
	vals := cmd.Val()
	if err != nil || len(vals) != 2 {
		return "", 0, fmt.Errorf("slotstore: reading alert delivery %s: %w", id, err)
	}
	state, _ := vals[0].(string)
	attempts, _ := strconv.Atoi(fmt.Sprint(vals[1]))
	return state, attempts, nil
}

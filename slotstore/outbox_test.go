package slotstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slotstore"
)

// TestOutbox: a delivery is added once whoever adds it; the sender that
// added it holds it first; a held delivery is no one else's until its hold
// lapses; a delivered one is never taken again.
func TestOutbox(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	if added, err := s.AddDelivery(ctx, "d1", "a", `{"x":1}`, "http://h/1", time.Hour); err != nil || !added {
		t.Fatalf("add: %v %v", added, err)
	}
	if added, _ := s.AddDelivery(ctx, "d1", "b", `{"x":2}`, "http://h/1", time.Hour); added {
		t.Fatal("the same delivery added twice")
	}
	if ids, err := s.DueDeliveries(ctx, 10); err != nil || len(ids) != 1 || ids[0] != "d1" {
		t.Fatalf("due: %v %v", ids, err)
	}
	if _, ok, _ := s.TakeDelivery(ctx, "d1", "b", time.Second); ok {
		t.Fatal("b took a's delivery during a's hold")
	}
	d, ok, err := s.TakeDelivery(ctx, "d1", "a", 100*time.Millisecond)
	if err != nil || !ok || d.Payload != `{"x":1}` || d.URL != "http://h/1" || d.Attempts != 0 {
		t.Fatalf("take: %+v %v %v", d, ok, err)
	}
	if ok, _ := s.DeliveryDone(ctx, "d1", "a", slotstore.Retry, 0, 100*time.Millisecond, "503"); !ok {
		t.Fatal("retry not recorded")
	}
	if _, ok, _ := s.TakeDelivery(ctx, "d1", "b", time.Minute); ok {
		t.Fatal("b took a's retry while a holds it")
	}
	time.Sleep(150 * time.Millisecond) // a's hold lapses: a died, say
	d, ok, _ = s.TakeDelivery(ctx, "d1", "b", time.Minute)
	if !ok || d.Attempts != 1 {
		t.Fatalf("b could not take the lapsed delivery: %+v %v", d, ok)
	}
	if ok, _ := s.DeliveryDone(ctx, "d1", "a", slotstore.Delivered, 0, 0, ""); ok {
		t.Fatal("a settled a delivery b holds")
	}
	if ok, _ := s.DeliveryDone(ctx, "d1", "b", slotstore.Delivered, 0, 0, ""); !ok {
		t.Fatal("b could not settle")
	}
	if _, ok, _ := s.TakeDelivery(ctx, "d1", "b", time.Minute); ok {
		t.Fatal("a delivered delivery was taken again")
	}
	if state, attempts, err := s.DeliveryState(ctx, "d1"); err != nil || state != "delivered" || attempts != 2 {
		t.Fatalf("state %q, %d attempts, %v", state, attempts, err)
	}
	if ids, _ := s.DueDeliveries(ctx, 10); len(ids) != 0 {
		t.Fatalf("still due: %v", ids)
	}
}

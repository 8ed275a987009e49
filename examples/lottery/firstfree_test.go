package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestFirstFreeSlotWaitsForTheSlotBefore: the demo's first slot is one
// whose slot before, due since the replicas started, has a record whose
// draw no longer holds the job. Before, a slot before with no record yet
// (its claim late on a busy machine, within its misfire grace) passed the
// look, and its draw, started after it, held the job at the demo's first
// slot: recorded skipped, a CI failure ("1 draw, 1 missed"). Wall time: the
// look waits for each slot's time, at most 2 s here.
func TestFirstFreeSlotWaitsForTheSlotBefore(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	prefix := srv.Key("demo")
	sched, err := scheduler.ParseSchedule("@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The replicas started after any slot before the next: nothing to wait for.
	now := time.Now()
	if first, err := firstFreeSlot(ctx, rdb, prefix, sched, now, time.Minute); err != nil || !first.Equal(sched.Next(now)) {
		t.Fatalf("with no slot since the start: %v, %v; want %v at once", first, err, sched.Next(now))
	}

	// Slots due since the start have no record: not free, however long.
	_, err = firstFreeSlot(ctx, rdb, prefix, sched, time.Now().Add(-5*time.Second), 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "has no record") {
		t.Fatalf("with the slot before unclaimed: %v; want an error saying it has no record", err)
	}

	// The slot before has a record, its draw done: free.
	store, err := slotstore.New(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	// A second to claim, finish and look in: on a machine too busy for that
	// (the look must come before the next slot's time less lookBefore), the
	// setup is tried again on the next second, three times at most.
	for try := 0; ; try++ {
		before := sched.Next(time.Now())
		time.Sleep(time.Until(before.Add(10 * time.Millisecond)))
		next := before.Add(time.Second)
		res, err := store.Claim(ctx, []slot.Claim{{Kind: slot.ClaimLive, Job: lottery.Name, Slot: before, Replica: "r1",
			LeaseTTL: 5 * time.Second, Retention: time.Hour, Deadline: time.Now().Add(time.Minute)}})
		if err != nil || res[0].Err != nil || res[0].Outcome != slot.OutcomeWon {
			t.Fatalf("claim of the slot before: %+v, %v", res, err)
		}
		if err := store.Finish(ctx, []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}})[0]; err != nil {
			t.Fatal(err)
		}
		if time.Until(next) < 2*lookBefore {
			if try == 2 {
				t.Fatal("three times, the claim and finish of a slot took most of a second: the machine is too busy for this test")
			}
			continue
		}
		if first, err := firstFreeSlot(ctx, rdb, prefix, sched, before.Add(-time.Millisecond), time.Minute); err != nil || !first.Equal(next) {
			t.Fatalf("with the slot before done: %v, %v; want %v", first, err, next)
		}
		return
	}
}

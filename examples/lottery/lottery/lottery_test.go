package lottery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

func TestDrawTenDistinctWinners(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := lottery.New(rdb, srv.Key("lottery"))
	ctx := context.Background()
	slot := time.Unix(1_795_000_000, 0)
	if err := l.Draw(ctx, jobs.Run{Job: "lottery", Slot: slot, Fence: 1, Replica: "r1"}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.SCard(ctx, l.Key("participants")).Val(); n != 1000 {
		t.Fatalf("seeded %d participants, want 1000", n)
	}
	draws, err := l.Draws(ctx)
	if err != nil || len(draws) != 1 {
		t.Fatalf("draws %v, %v", draws, err)
	}
	seen := map[string]bool{}
	for _, w := range draws[0].Winners {
		seen[w] = true
	}
	if len(seen) != 10 || draws[0].Slot != slot.Unix() || draws[0].Fence != 1 || draws[0].Replica != "r1" {
		t.Fatalf("draw %+v", draws[0])
	}
	h := rdb.HGetAll(ctx, l.DrawKey(slot.Unix())).Val()
	if h["replica"] != "r1" || h["fence"] != "1" || len(h["winners"]) == 0 {
		t.Fatalf("draw hash %v", h)
	}
}

// TestZombieIsRefused: the owner of slot S (fence 5) is paused past its
// lease; a new owner draws slot S+1 with fence 6. The paused owner wakes and
// writes its draw of S with fence 5: refused, and nothing changes.
func TestZombieIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := lottery.New(rdb, srv.Key("lottery"))
	ctx := context.Background()
	newer := lottery.Entry{Slot: 1_795_000_060, Replica: "b", Fence: 6, Winners: []string{"user-0001", "user-0002"}}
	if err := l.Write(ctx, newer); err != nil {
		t.Fatal(err)
	}
	before := rdb.LRange(ctx, l.Key("draws"), 0, -1).Val()
	zombie := lottery.Entry{Slot: 1_795_000_000, Replica: "a", Fence: 5, Winners: []string{"user-0666"}}
	err := l.Write(ctx, zombie)
	if !errors.Is(err, lottery.ErrStaleFence) {
		t.Fatalf("zombie write: %v, want ErrStaleFence", err)
	}
	after := rdb.LRange(ctx, l.Key("draws"), 0, -1).Val()
	if len(after) != len(before) || after[0] != before[0] {
		t.Fatalf("draws changed: %v -> %v", before, after)
	}
	if rdb.Exists(ctx, l.DrawKey(zombie.Slot)).Val() != 0 {
		t.Fatal("the zombie's draw hash was written")
	}
	if got := rdb.Get(ctx, l.Key("fence")).Val(); got != "6" {
		t.Fatalf("highest fence is %s, want 6", got)
	}
	// The same slot again, even with a newer fence (a retried attempt), keeps
	// the first draw: no slot is drawn twice.
	again := newer
	again.Fence, again.Replica = 7, "c"
	if err := l.Write(ctx, again); err != nil {
		t.Fatal(err)
	}
	if n := rdb.LLen(ctx, l.Key("draws")).Val(); n != 1 {
		t.Fatalf("%d draws after a second write of one slot", n)
	}
}

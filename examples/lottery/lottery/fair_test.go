package lottery_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestDrawIsFairOnTheEmbeddedRedis: on the demo's embedded Redis
// (miniredis), whose SRANDMEMBER leaves the first members of a set where
// they were about one time in seven, user-0001 wins about as often as
// chance says: 10 winners of 1,000, so 3 times in 300 draws (more than 15
// has odds below one in a million; SRANDMEMBER gave about 45).
func TestDrawIsFairOnTheEmbeddedRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	store, err := slotstore.New(rdb, "sc")
	if err != nil {
		t.Fatal(err)
	}
	l := lottery.New(rdb, "sc")
	ctx := context.Background()
	const draws = 300
	first := time.Now().Truncate(time.Second).Add(-time.Hour)
	for i := range draws {
		at := first.Add(time.Duration(i) * time.Second)
		res, err := store.Claim(ctx, []slot.Claim{{Kind: slot.ClaimCatchup, Job: lottery.Name, Slot: at, Replica: "r1",
			LeaseTTL: time.Minute, Retention: time.Hour}})
		if err != nil || res[0].Err != nil || res[0].Outcome != slot.OutcomeWon {
			t.Fatalf("claim %d: %+v %v", i, res, err)
		}
		if err := l.Draw(ctx, jobs.Run{Job: lottery.Name, Slot: at, Fence: res[0].Fence, Replica: "r1"}); err != nil {
			t.Fatal(err)
		}
		if errs := store.Finish(ctx, []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	all, err := l.Draws(ctx)
	if err != nil || len(all) != draws {
		t.Fatalf("%d draws, %v", len(all), err)
	}
	wins := 0
	for _, d := range all {
		for _, w := range d.Winners {
			if w == "user-0001" {
				wins++
			}
		}
	}
	if wins > 15 {
		t.Errorf("user-0001 won %d of %d draws; chance says about %d", wins, draws, draws*lottery.Winners/1000)
	}
	t.Logf("user-0001 won %d of %d draws", wins, draws)
}

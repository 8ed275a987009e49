package locking

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
)

// TestSlotClaimRetryIsRecognised: go-redis retries a command whose reply was
// lost on the network. The claim script must answer the retry with the same
// win, not as a rival that lost, and must not count a second fence.
func TestSlotClaimRetryIsRecognised(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := NewSlots(srv.Client(), srv.Key("retry"))
	c := SlotClaim{Kind: ClaimLive, Job: "j", Slot: time.Unix(1_700_001_000, 0), Replica: "r1",
		LeaseTTL: time.Second, Retention: time.Hour, Deadline: time.Now().Add(time.Minute)}
	tokens := make([]string, 1)
	again := s.claimCall([]SlotClaim{c}, tokens, []int{0}) // one call, sent twice, as a retry does
	ctx := context.Background()
	var fences []int64
	for range 2 {
		vals, err := s.batch(ctx, []call{again})[0].Slice()
		if err != nil {
			t.Fatal(err)
		}
		res := s.parseClaim(ctx, c, tokens[0], time.Now(), vals[0].([]any), nil)
		if res.Outcome != OutcomeWon {
			t.Fatalf("claim with the same token: %+v", res)
		}
		fences = append(fences, res.Fence)
		res.Lease.v.end(nil)
	}
	if fences[0] != fences[1] {
		t.Fatalf("a retried claim took a new fence: %v", fences)
	}
}

func TestHashSlotMatchesCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client()
	for i := range 200 {
		tag := "job-" + strconv.Itoa(i*7919)
		want, err := rdb.ClusterKeySlot(context.Background(), "x{"+tag+"}y").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := hashSlot(tag); int64(got) != want {
			t.Fatalf("hashSlot(%q) = %d, CLUSTER KEYSLOT says %d", tag, got, want)
		}
	}
}

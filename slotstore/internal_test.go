package slotstore

import (
	"context"
	"strconv"
	"testing"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/internal/redistest"
)

func TestHashSlotMatchesCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client()
	for i := range 200 {
		tag := "job-" + strconv.Itoa(i*7919)
		want, err := rdb.ClusterKeySlot(context.Background(), "x{"+tag+"}y").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := rediskit.HashSlot(tag); int64(got) != want {
			t.Fatalf("hashSlot(%q) = %d, CLUSTER KEYSLOT says %d", tag, got, want)
		}
	}
}

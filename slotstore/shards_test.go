package slotstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slotstore"
)

// TestCheckShardsOnCluster: on a Cluster, the deployment's epoch (Probe) lives
// on one master, so another master that loses its data (here FLUSHALL, as a
// restart without persistence would) leaves it standing. CheckShards keeps an
// epoch on each range of hash slots: the replica that knew the lost one
// reports it, once, naming the node; a replica that first checks after the
// loss knows nothing to report; on a single server there is nothing to check.
func TestCheckShardsOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	cc := c.Client()
	s, err := slotstore.New(cc, "sc")
	if err != nil {
		t.Fatal(err)
	}
	if lost, err := s.CheckShards(ctx); err != nil || len(lost) != 0 {
		t.Fatalf("first check: %v, %v; want no loss", lost, err)
	}
	probe, err := s.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each master holds one epoch of the check's; pick one that does not
	// hold the deployment's epoch.
	home, err := cc.ClusterKeySlot(ctx, "sc:epoch").Result()
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	victim := ""
	for _, r := range ranges {
		node := redis.NewClient(&redis.Options{Addr: r.Nodes[0].Addr, DisableIdentity: true})
		keys, err := node.Keys(ctx, "sc:epoch:*").Result()
		node.Close()
		if err != nil || len(keys) != 1 {
			t.Fatalf("master %s (slots %d-%d) holds epochs %v (%v); want one", r.Nodes[0].Addr, r.Start, r.End, keys, err)
		}
		if int64(r.Start) > home || int64(r.End) < home {
			victim = r.Nodes[0].Addr
		}
	}
	if victim == "" || !slices.Contains(c.Addrs(), victim) {
		t.Fatalf("no master of the test's own cluster without the deployment's epoch: %q", victim)
	}
	node := redis.NewClient(&redis.Options{Addr: victim, DisableIdentity: true})
	defer node.Close()
	if err := node.FlushAll(ctx).Err(); err != nil { // a master this test started
		t.Fatal(err)
	}
	if p, err := s.Probe(ctx); err != nil || p.Epoch != probe.Epoch || p.Created {
		t.Fatalf("probe after the loss: %+v, %v; want the same epoch (it lives elsewhere)", p, err)
	}
	// Another replica checks first: it writes the lost range's epoch anew,
	// and has nothing to report.
	other, err := slotstore.New(c.Client(), "sc")
	if err != nil {
		t.Fatal(err)
	}
	if lost, err := other.CheckShards(ctx); err != nil || len(lost) != 0 {
		t.Fatalf("a replica's first check after the loss: %v, %v; want no loss (it knew nothing)", lost, err)
	}
	lost, err := s.CheckShards(ctx)
	if err != nil || len(lost) != 1 || !strings.HasSuffix(lost[0].Shard, " on "+victim) || lost[0].Epoch == "" {
		t.Fatalf("check after the loss: %+v, %v; want one loss, on %s", lost, err, victim)
	}
	if lost, err := s.CheckShards(ctx); err != nil || len(lost) != 0 {
		t.Fatalf("the check after: %v, %v; want the loss reported once", lost, err)
	}
	_, _, single := newSlots(t)
	if lost, err := single.CheckShards(ctx); err != nil || lost != nil {
		t.Fatalf("on a single server: %v, %v; want nothing to check", lost, err)
	}
}

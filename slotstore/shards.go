package slotstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/slot"
)

// CheckShards finds, on a Redis Cluster, the shards that lost data since this
// Store last checked them. The deployment's epoch (Probe) lives on one
// shard, and each job's keys on the shard of its hash tag, so a master that
// restarts without persistence, or fails over to a lagging replica, loses
// some jobs' records, leases and fence counters while the epoch stands. So
// each range of hash slots gets an epoch of its own, under
// <prefix>:epoch:{<tag>} with a tag of that range: a random value written
// when the key is missing. A value other than the one this Store read
// there before (gone, and written anew by whoever checked first) is a loss,
// which every replica that knew the old value reports alike; a range never
// seen before (the first check, a new master, a resharding) is only
// written. Two round trips (CLUSTER SLOTS, then one script call per range,
// pipelined); on a single server or Sentinel, where Probe's epoch covers
// everything, none, and no loss.
func (s *Store) CheckShards(ctx context.Context) ([]slot.ShardLoss, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || s.topology != topoCluster {
		return nil, nil
	}
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("slotstore: checking the shards: %w", err)
	}
	calls := make([]call, len(ranges))
	keys := make([]string, len(ranges))
	for i, r := range ranges {
		keys[i] = s.prefix + ":epoch:{" + s.shardTag(int64(r.Start), int64(r.End)) + "}"
		calls[i] = call{probeScript, []string{keys[i]}, []any{rediskit.NewToken()}}
	}
	cmds := s.batch(ctx, calls)
	s.shardsMu.Lock()
	defer s.shardsMu.Unlock()
	if s.shardEpochs == nil {
		s.shardEpochs = map[string]string{}
	}
	var lost []slot.ShardLoss
	var errs []error
	for i, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		epoch := reply(vals).str(2)
		if epoch == "" {
			errs = append(errs, fmt.Errorf("unexpected reply %v", vals))
			continue
		}
		if known := s.shardEpochs[keys[i]]; known != "" && known != epoch {
			node := ""
			if len(ranges[i].Nodes) > 0 {
				node = " on " + ranges[i].Nodes[0].Addr
			}
			lost = append(lost, slot.ShardLoss{Shard: fmt.Sprintf("slots %d-%d%s", ranges[i].Start, ranges[i].End, node), Epoch: known})
		}
		s.shardEpochs[keys[i]] = epoch
	}
	if len(errs) > 0 {
		return lost, fmt.Errorf("slotstore: checking the shards: %d of %d ranges unanswered, the first: %w", len(errs), len(ranges), errs[0])
	}
	return lost, nil
}

// shardTag is a hash tag whose hash slot is in [start, end]: the smallest
// decimal number that has one, remembered per range.
func (s *Store) shardTag(start, end int64) string {
	s.shardsMu.Lock()
	defer s.shardsMu.Unlock()
	r := [2]int64{start, end}
	if tag, ok := s.shardTags[r]; ok {
		return tag
	}
	tag := ""
	for n := 0; ; n++ {
		tag = strconv.Itoa(n)
		if h := int64(rediskit.HashSlot(tag)); h >= start && h <= end {
			break
		}
	}
	if s.shardTags == nil {
		s.shardTags = map[[2]int64]string{}
	}
	s.shardTags[r] = tag
	return tag
}

package worker

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
)

// TestSentinelsWithAPassword reaches the master through sentinels that ask
// for a password of their own (redis.sentinel_password), as a Helm chart's
// sentinels do by default: redis.password goes to the master only.
func TestSentinelsWithAPassword(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := context.Background()
	for _, a := range s.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: a})
		if err := c.Do(ctx, "ACL", "SETUSER", "default", "on", "resetpass", ">sentinel-secret").Err(); err != nil {
			t.Fatalf("sentinel %s: ACL SETUSER: %v", a, err)
		}
		c.Close()
	}
	cfg := RedisConfig{Mode: ModeSentinel, Addrs: s.Addrs(), MasterName: redistest.MasterName, SentinelPassword: "sentinel-secret"}
	rdb, closeRedis, err := NewRedis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRedis()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		t.Fatalf("PING through sentinels that ask for a password, with redis.sentinel_password set: %v", err)
	}
}

package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster of three masters (no replicas), each a
// redis-server process on a loopback port, gone when the test ends.
type Cluster struct {
	nodes   []*process
	clients []*redis.ClusterClient
}

// StartCluster starts three redis-server processes with cluster mode on, joins
// them with redis-cli --cluster create, and waits until every node reports
// cluster_state:ok. It needs redis-server and redis-cli on PATH, and fails the
// test, naming them, when they are missing.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("redistest: StartCluster needs %s on PATH (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)", tool)
		}
	}
	c := &Cluster{}
	t.Cleanup(c.close)
	for range 3 {
		p, err := startProcess(t.TempDir(), "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			t.Fatalf("redistest: cluster node: %v", err)
		}
		c.nodes = append(c.nodes, p)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(20 * time.Second); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// Addrs returns the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// Client returns a new cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
	c.clients = append(c.clients, cc)
	return cc
}

func (c *Cluster) waitOK(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, addr := range c.Addrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := rdb.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				rdb.Close()
				return fmt.Errorf("cluster node %s not ready after %v: %v %s", addr, within, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rdb.Close()
	}
	return nil
}

func (c *Cluster) close() {
	for _, cc := range c.clients {
		_ = cc.Close()
	}
	for _, n := range c.nodes {
		n.close()
	}
}

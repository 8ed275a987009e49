package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a real Sentinel deployment: a master, one replica and three
// sentinels, gone when the test ends. StartSentinel runs each as a
// redis-server process on a loopback port; StartSentinelContainers runs each
// in a container of its own. The master's name is MasterName.
type Sentinel struct {
	t         testing.TB
	servers   []node // the master and the replica; roles swap on failover
	sentinels []node
	clients   []redis.UniversalClient
	after     []func() // run once every node is closed: the containers' network
}

// node is one redis-server of a Sentinel deployment, a process or a container.
type node interface {
	address() string // host:port, as the sentinels announce it
	stop() error     // the master stops, for StopMaster
	close()
}

// MasterName is the name the sentinels monitor the master under.
const MasterName = "slotcron-test"

// StartSentinel starts a master, a replica of it and three sentinels with a
// quorum of 2 and a 1s down-after, and waits until the replica is in sync and
// every sentinel knows the others. It needs redis-server on PATH.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redistest: StartSentinel needs redis-server on PATH (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
	}
	s := &Sentinel{t: t}
	// The processes' directories are made before s.close is registered, so
	// that the processes are stopped before their directories are removed
	// (cleanups run last-registered first).
	dirs := make([]string, 5)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	t.Cleanup(s.close)
	master, err := startProcess(dirs[0])
	if err != nil {
		t.Fatalf("redistest: sentinel's master: %v", err)
	}
	s.servers = append(s.servers, master)
	replica, err := startProcess(dirs[1], "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	if err != nil {
		t.Fatalf("redistest: sentinel's replica: %v", err)
	}
	s.servers = append(s.servers, replica)
	for _, dir := range dirs[2:] {
		conf := filepath.Join(dir, "sentinel.conf")
		body := sentinelConf("127.0.0.1", master.port)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var p *process
		for range 5 { // a free port can be taken between probing and binding
			port, perr := freePort()
			if perr != nil {
				t.Fatal(perr)
			}
			p = &process{dir: dir, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), sentinel: conf}
			if err = p.launch(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: sentinel: %v", err)
		}
		s.sentinels = append(s.sentinels, p)
	}
	if err := s.wait(30*time.Second, s.ready); err != nil {
		t.Fatalf("redistest: sentinel deployment not ready: %v", err)
	}
	return s
}

// sentinelConf is what every sentinel monitors, with a quorum of 2: the
// master at host:port, judged down after 1s.
func sentinelConf(host string, port int) string {
	return fmt.Sprintf("sentinel monitor %s %s %d 2\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 10000\n"+
		"sentinel parallel-syncs %s 1\n", MasterName, host, port, MasterName, MasterName, MasterName)
}

// Addrs returns the sentinels' host:port addresses.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		out[i] = p.address()
	}
	return out
}

// Client returns a failover client (through the sentinels), closed when the
// test ends.
func (s *Sentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.Addrs()})
	s.clients = append(s.clients, c)
	return c
}

// Master returns the current master's address, as the sentinels see it.
func (s *Sentinel) Master() string {
	s.t.Helper()
	addr, err := s.masterAddr()
	if err != nil {
		s.t.Fatalf("redistest: sentinel master: %v", err)
	}
	return addr
}

func (s *Sentinel) masterAddr() (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].address()})
	defer c.Close()
	a, err := c.GetMasterAddrByName(context.Background(), MasterName).Result()
	if err != nil {
		return "", err
	}
	return a[0] + ":" + a[1], nil
}

// Failover forces a failover (SENTINEL FAILOVER) and waits until the old
// replica is the master the sentinels name and answers as one. It returns
// the old and the new master's addresses.
func (s *Sentinel) Failover() (from, to string) {
	s.t.Helper()
	from = s.Master()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].address()})
	defer c.Close()
	if err := c.Failover(context.Background(), MasterName).Err(); err != nil {
		s.t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	err := s.wait(30*time.Second, func() error {
		to, _ = s.masterAddr()
		if to == "" || to == from {
			return fmt.Errorf("the sentinels still name %s", from)
		}
		return role(to, "master")
	})
	if err != nil {
		s.t.Fatalf("redistest: failover from %s: %v", from, err)
	}
	return from, to
}

// Replica returns the address of the master's one replica, as the sentinels
// see it (SENTINEL REPLICAS). It fails the test unless there is exactly one.
func (s *Sentinel) Replica() string {
	s.t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].address()})
	defer c.Close()
	replicas, err := c.Replicas(context.Background(), MasterName).Result()
	if err != nil {
		s.t.Fatalf("redistest: SENTINEL REPLICAS: %v", err)
	}
	if len(replicas) != 1 {
		s.t.Fatalf("redistest: the sentinels know %d replicas, want 1: %v", len(replicas), replicas)
	}
	return replicas[0]["ip"] + ":" + replicas[0]["port"]
}

// StopMaster stops the master, as a crash would (StartSentinel's process is
// killed; StartSentinelContainers' container is stopped, docker stop), and
// waits until the sentinels have noticed, agreed and promoted the replica:
// they name another master and it answers as one. It returns the old and the
// new master's addresses. The old master stays stopped.
func (s *Sentinel) StopMaster() (from, to string) {
	s.t.Helper()
	from = s.Master()
	var master node
	for _, n := range s.servers {
		if n.address() == from {
			master = n
		}
	}
	if master == nil {
		s.t.Fatalf("redistest: the sentinels name %s, which is none of this deployment's servers", from)
	}
	if err := master.stop(); err != nil {
		s.t.Fatalf("redistest: stop the master %s: %v", from, err)
	}
	// Noticing takes down-after (1s), then a vote; an election that splits
	// is tried again after twice failover-timeout (20s).
	err := s.wait(60*time.Second, func() error {
		to, _ = s.masterAddr()
		if to == "" || to == from {
			return fmt.Errorf("the sentinels still name %s", from)
		}
		return role(to, "master")
	})
	if err != nil {
		s.t.Fatalf("redistest: failover after stopping %s: %v", from, err)
	}
	return from, to
}

// ready reports whether the replica is in sync and every sentinel knows the
// other two and the replica.
func (s *Sentinel) ready() error {
	if err := role(s.servers[1].address(), "slave"); err != nil {
		return err
	}
	r := redis.NewClient(&redis.Options{Addr: s.servers[1].address()})
	defer r.Close()
	info, err := r.Info(context.Background(), "replication").Result()
	if err != nil || !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica not in sync: %v", err)
	}
	for _, p := range s.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: p.address()})
		m, err := c.Master(context.Background(), MasterName).Result()
		c.Close()
		if err != nil {
			return err
		}
		if m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" {
			return fmt.Errorf("sentinel %s sees %s other sentinels and %s replicas", p.address(), m["num-other-sentinels"], m["num-slaves"])
		}
	}
	return nil
}

// role checks that the server at addr has the given replication role.
func role(addr, want string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:"+want) {
		return fmt.Errorf("%s is not a %s", addr, want)
	}
	return nil
}

func (s *Sentinel) wait(d time.Duration, ok func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := ok()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Sentinel) close() {
	for _, c := range s.clients {
		c.Close()
	}
	for _, p := range append(s.sentinels, s.servers...) {
		p.close()
	}
	for _, f := range s.after {
		f()
	}
}

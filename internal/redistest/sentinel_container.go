package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// StartSentinelContainers starts the deployment StartSentinel starts (a
// master, a replica of it and three sentinels with a quorum of 2 and a 1s
// down-after), each in a container of its own on a Docker network of its own,
// and waits until the replica is in sync and every sentinel knows the others.
// StopMaster then stops the master's container (docker stop). The image is
// slotcron/redis:7, or REDISTEST_IMAGE; the sentinels run it as
// redis-server <conf> --sentinel.
//
// The sentinels announce the servers' addresses on that network, and the test
// talks to them there: the containers' addresses must be reachable from the
// test process, as they are on Linux with a local Docker daemon (a bridge
// network is routed from the host). Where they are not (Docker Desktop), the
// test fails saying so; StartSentinel runs the same deployment as processes.
// Where no Docker daemon answers, the test fails saying what to install; it
// never skips. The containers and the network are removed when the test ends;
// a test binary that is killed leaves them, until the next test binary that
// starts a container removes them (see withoutReaper).
func StartSentinelContainers(t testing.TB) *Sentinel {
	t.Helper()
	if err := dockerAnswers(); err != nil {
		t.Fatalf("redistest: StartSentinelContainers needs a Docker daemon, and none answers (%v): install and start Docker "+
			"(Debian/Ubuntu: apt-get install docker.io; macOS: Docker Desktop), then build the image: deploy/images/build.sh redis. "+
			"Without Docker, StartSentinel runs the same deployment as processes", err)
	}
	reapOnce()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	image := containerImage()
	if err := imageIsHere(ctx, image); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(ownerLabels()))
	if err != nil {
		t.Fatalf("redistest: create a Docker network for the sentinel deployment: %v", err)
	}
	s := &Sentinel{t: t}
	s.after = append(s.after, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := nw.Remove(ctx); err != nil {
			t.Errorf("redistest: remove Docker network %s: %v", nw.Name, err)
		}
	})
	t.Cleanup(s.close)

	server := []string{"redis-server", "--port", "6379", "--protected-mode", "no", "--bind", "0.0.0.0",
		"--save", "", "--appendonly", "no"}
	master, err := startNode(ctx, image, nw, 6379,
		testcontainers.WithCmd(server...),
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections")))
	if err != nil {
		t.Fatalf("redistest: sentinel's master: %v", err)
	}
	s.servers = append(s.servers, master)
	if err := reachable(master.addr); err != nil {
		t.Fatalf("redistest: the master's container listens at %s on Docker network %s, but that address does not answer "+
			"here (%v): StartSentinelContainers needs the containers' addresses to be reachable from the test process, as "+
			"they are on Linux with a local Docker daemon; Docker Desktop does not route them. StartSentinel runs the "+
			"same deployment as processes", master.addr, nw.Name, err)
	}
	replica, err := startNode(ctx, image, nw, 6379,
		testcontainers.WithCmd(append(server, "--replicaof", master.host, "6379")...),
		testcontainers.WithWaitStrategy(wait.ForLog("MASTER <-> REPLICA sync: Finished with success")))
	if err != nil {
		t.Fatalf("redistest: sentinel's replica: %v", err)
	}
	s.servers = append(s.servers, replica)
	// A sentinel rewrites its config file, so the file is written inside the
	// container, where the image's user may write, from the environment.
	conf := "port 26379\nbind 0.0.0.0\nprotected-mode no\n" + sentinelConf(master.host, 6379)
	for range 3 {
		p, err := startNode(ctx, image, nw, 26379,
			testcontainers.WithEnv(map[string]string{"SENTINEL_CONF": conf}),
			testcontainers.WithCmd("sh", "-c",
				`printf '%s' "$SENTINEL_CONF" > /tmp/sentinel.conf && exec redis-server /tmp/sentinel.conf --sentinel`),
			testcontainers.WithWaitStrategy(wait.ForLog("+monitor master")))
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

// netNode is a redis-server in a container, addressed on its Docker network.
type netNode struct {
	c       *testcontainers.DockerContainer
	network string
	host    string // its address on the network
	addr    string // host:port
}

// startNode starts a container on nw from image and reads its address there;
// port is the one its redis-server listens on.
func startNode(ctx context.Context, image string, nw *testcontainers.DockerNetwork, port int,
	opts ...testcontainers.ContainerCustomizer) (*netNode, error) {
	opts = append(opts, tcnetwork.WithNetwork(nil, nw), testcontainers.WithLabels(ownerLabels()))
	c, err := testcontainers.Run(ctx, image, opts...)
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("start %s container: %w", image, err)
	}
	inspect, err := c.Inspect(ctx)
	if err != nil {
		_ = c.Terminate(context.Background())
		return nil, fmt.Errorf("inspect container: %w", err)
	}
	settings, ok := inspect.NetworkSettings.Networks[nw.Name]
	if !ok || !settings.IPAddress.IsValid() {
		_ = c.Terminate(context.Background())
		return nil, fmt.Errorf("container %.12s has no address on network %s", c.GetContainerID(), nw.Name)
	}
	host := settings.IPAddress.String()
	return &netNode{c: c, network: nw.Name, host: host, addr: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

func (n *netNode) address() string { return n.addr }

// stop is docker stop: SIGTERM, and SIGKILL after Docker's default 10s. The
// container keeps its file system but leaves the network, and its address
// answers no more.
func (n *netNode) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return n.c.Stop(ctx, nil)
}

func (n *netNode) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = n.c.Terminate(ctx)
}

// reachable reports nil when a TCP connection to addr opens from here.
func reachable(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

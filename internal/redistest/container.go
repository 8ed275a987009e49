package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	dockercontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// defaultImage is the container backend's image: Debian bookworm's
// redis-server, built on this machine by deploy/images/build.sh, because our CI
// reaches no registry. REDISTEST_IMAGE overrides it, e.g. REDISTEST_IMAGE=redis:7
// where Docker Hub is reachable.
const defaultImage = "slotcron/redis:7"

func containerImage() string {
	if image := os.Getenv("REDISTEST_IMAGE"); image != "" {
		return image
	}
	return defaultImage
}

// withoutReaper turns testcontainers-go's reaper (Ryuk) off, unless
// TESTCONTAINERS_RYUK_DISABLED already says what to do. Ryuk runs from its own
// image, testcontainers/ryuk, which can't be pulled where no registry answers,
// and then every container start fails on it. Each Server terminates its
// container in its test's Cleanup, so the reaper only matters for a test
// binary that is killed (SIGKILL, a -timeout panic): its containers are left
// running, until the next test binary that starts one removes them
// (reapOnce, by the label ownerLabel that names the process that started
// them). By hand, when no test is running: docker rm -f $(docker ps -aq
// --filter label=io.slotcron.redistest.owner), then docker network rm
// $(docker network ls -q --filter label=io.slotcron.redistest.owner).
// testcontainers-go reads its configuration once per process, so this runs
// before each of its entry points here.
var withoutReaper = sync.OnceFunc(func() {
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
})

// dockerAnswers reports nil when a Docker daemon answers within a few seconds.
// testcontainers-go panics in some set-ups with no Docker host at all; that is
// an answer too ("no"), not a crash of the test binary.
func dockerAnswers() (err error) {
	withoutReaper()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker host: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Info(ctx, client.InfoOptions{})
	return err
}

// container is a Redis in a Docker container, started by testcontainers-go.
// Restart replaces the container with a new one published on the same host
// port, so that the server keeps its address, as a restarted process does.
type container struct {
	image string
	host  string // where its published port answers from here; see reachableHost

	mu   sync.Mutex
	c    *testcontainers.DockerContainer
	addr string
}

func startContainer() (*container, error) {
	withoutReaper()
	reapOnce()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := containerImage()
	if err := imageIsHere(ctx, image); err != nil {
		return nil, err
	}
	c, err := runContainer(ctx, image, "")
	if err != nil {
		return nil, err
	}
	ct := &container{image: image, c: c}
	if ct.host, err = reachableHost(ctx, c); err != nil {
		_ = c.Terminate(context.Background())
		return nil, err
	}
	if err := ct.refreshAddr(ctx, c); err != nil {
		_ = c.Terminate(context.Background())
		return nil, err
	}
	return ct, nil
}

// runContainer starts a Redis container whose 6379 is published on hostPort
// of the Docker host, or on a port Docker picks when hostPort is "".
func runContainer(ctx context.Context, image, hostPort string) (*testcontainers.DockerContainer, error) {
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts("6379/tcp"),
		// The command is the whole of it, so that any redis image behaves the
		// same: every interface and no protected mode, or the published port
		// (a connection from outside the container) is refused; no persistence.
		testcontainers.WithCmd("redis-server", "--protected-mode", "no", "--bind", "0.0.0.0",
			"--save", "", "--appendonly", "no"),
		// Redis's own log line needs no guess at where the published port
		// answers (wait.ForListeningPort dials testcontainers-go's guess, see
		// reachableHost); Start then PINGs the address chosen here.
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections")),
		testcontainers.WithLabels(ownerLabels()), // removed by a later test binary if this one is killed
	}
	// Published on IPv4 only. Docker picks the IPv4 and the IPv6 port of a
	// binding apart, so they drift (0.0.0.0:32905 and [::]:32881); Restart
	// asking for the IPv4 port on both could then find the IPv6 one taken by
	// another container ("Bind for :::32837 failed: port is already allocated").
	if hostPort == "" {
		hostPort = "0" // Docker picks
	}
	opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *dockercontainer.HostConfig) {
		hc.PortBindings = network.PortMap{
			network.MustParsePort("6379/tcp"): {{HostIP: netip.IPv4Unspecified(), HostPort: hostPort}},
		}
	}))
	c, err := testcontainers.Run(ctx, image, opts...)
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("start %s container: %w", image, err)
	}
	return c, nil
}

// reachableHost returns the host on which the container's published 6379
// accepts a connection from here: the one testcontainers-go reports, else the
// loopback. With a local socket and a /.dockerenv file, testcontainers-go
// takes the tests to run in a container beside the daemon and reports the
// default gateway. Where the daemon runs inside that same container (our CI
// machine: a sandbox with its own dockerd), the ports are on the loopback and
// the gateway never answers. TESTCONTAINERS_HOST_OVERRIDE, when set, is what
// testcontainers-go reports.
func reachableHost(ctx context.Context, c *testcontainers.DockerContainer) (string, error) {
	endpoint, err := c.PortEndpoint(ctx, "6379/tcp", "")
	if err != nil {
		return "", fmt.Errorf("container address: %w", err)
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return "", fmt.Errorf("container address %q: %w", endpoint, err)
	}
	var errs []error
	for _, h := range []string{host, "127.0.0.1"} {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(h, port), 2*time.Second)
		if err == nil {
			_ = conn.Close()
			return h, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("the container's port 6379, published on %s, does not answer here (%w); "+
		"set TESTCONTAINERS_HOST_OVERRIDE to the host where Docker publishes ports", port, errors.Join(errs...))
}

// imageIsHere fails at once, saying how to build it, when one of our own
// slotcron/ images is missing: no registry has them, and testcontainers-go
// would try to pull it. Any other image is left to testcontainers-go to pull.
func imageIsHere(ctx context.Context, image string) error {
	if !strings.HasPrefix(image, "slotcron/") {
		return nil
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	images, err := cli.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", image)})
	if err != nil {
		return fmt.Errorf("look for image %s: %w", image, err)
	}
	if len(images.Items) == 0 && image == defaultImage {
		// A fresh machine: build it, as .ci/run would, so that the README's
		// test command passes there too (about a minute, once).
		return buildImage(image)
	}
	if len(images.Items) == 0 {
		return fmt.Errorf("image %s is not on this machine: build it with deploy/images/build.sh redis, "+
			"or set REDISTEST_IMAGE=redis:7 where Docker Hub is reachable", image)
	}
	return nil
}

// buildOnce builds the default image at most once per test binary.
var buildOnce = sync.OnceValue(func() error {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "images", "build.sh")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("no %s to build it with: %w", script, err)
	}
	fmt.Fprintf(os.Stderr, "redistest: image %s is not on this machine: building it with %s (about a minute, once)\n", defaultImage, script)
	cmd := exec.Command(script, "debian-base", "redis")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s debian-base redis: %w\n%s", script, err, out)
	}
	return nil
})

func buildImage(image string) error {
	if err := buildOnce(); err != nil {
		return fmt.Errorf("image %s is not on this machine, and building it failed (it needs root, debootstrap and Debian's "+
			"mirror; or set REDISTEST_IMAGE=redis:7 where Docker Hub is reachable): %w", image, err)
	}
	return nil
}

// refreshAddr records where c, now the server's container, is published.
func (c *container) refreshAddr(ctx context.Context, dc *testcontainers.DockerContainer) error {
	port, err := dc.MappedPort(ctx, "6379/tcp")
	if err != nil {
		return fmt.Errorf("container address: %w", err)
	}
	c.mu.Lock()
	c.c = dc
	c.addr = net.JoinHostPort(c.host, port.Port())
	c.mu.Unlock()
	return nil
}

func (c *container) address() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

func (c *container) current() *testcontainers.DockerContainer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

func (c *container) stop() error {
	d := time.Duration(0)
	return c.current().Stop(context.Background(), &d)
}

// restart removes the container and starts a new one on the same host port:
// a stopped container that is started again gets a new port from Docker.
func (c *container) restart() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, port, err := net.SplitHostPort(c.address())
	if err != nil {
		return err
	}
	if err := c.current().Terminate(ctx); err != nil {
		return err
	}
	dc, err := runContainer(ctx, c.image, port)
	if err != nil {
		return fmt.Errorf("on the same port %s: %w", port, err)
	}
	return c.refreshAddr(ctx, dc)
}

func (c *container) docker(f func(context.Context, *testcontainers.DockerClient, string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	return f(ctx, cli, c.current().GetContainerID())
}

func (c *container) pause() error {
	return c.docker(func(ctx context.Context, cli *testcontainers.DockerClient, id string) error {
		_, err := cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		return err
	})
}

func (c *container) resume() error {
	return c.docker(func(ctx context.Context, cli *testcontainers.DockerClient, id string) error {
		_, err := cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		return err
	})
}

func (c *container) close() { _ = c.current().Terminate(context.Background()) }

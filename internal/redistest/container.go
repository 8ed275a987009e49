package redistest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerImage is the image used when neither REDIS_ADDR nor redis-server is there.
const containerImage = "redis:7-alpine"

// dockerAnswers reports nil when a Docker daemon answers within a few seconds.
// testcontainers-go panics in some set-ups with no Docker host at all; that is
// an answer too ("no"), not a crash of the test binary.
func dockerAnswers() (err error) {
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
type container struct {
	c *testcontainers.DockerContainer

	mu   sync.Mutex
	addr string
}

func startContainer() (*container, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, containerImage,
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithCmd("redis-server", "--save", "", "--appendonly", "no"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("6379/tcp")),
	)
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("start %s container: %w", containerImage, err)
	}
	ct := &container{c: c}
	if err := ct.refreshAddr(ctx); err != nil {
		_ = c.Terminate(context.Background())
		return nil, err
	}
	return ct, nil
}

func (c *container) refreshAddr(ctx context.Context) error {
	addr, err := c.c.PortEndpoint(ctx, "6379/tcp", "")
	if err != nil {
		return fmt.Errorf("container address: %w", err)
	}
	c.mu.Lock()
	c.addr = addr
	c.mu.Unlock()
	return nil
}

func (c *container) address() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

func (c *container) stop() error {
	d := time.Duration(0)
	return c.c.Stop(context.Background(), &d)
}

// restart starts a fresh server. Docker may map a new host port; Server.Addr
// reports the current one.
func (c *container) restart() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := time.Duration(0)
	if err := c.c.Stop(ctx, &d); err != nil {
		return err
	}
	if err := c.c.Start(ctx); err != nil {
		return err
	}
	return c.refreshAddr(ctx)
}

func (c *container) docker(f func(context.Context, *testcontainers.DockerClient, string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	return f(ctx, cli, c.c.GetContainerID())
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

func (c *container) close() { _ = c.c.Terminate(context.Background()) }

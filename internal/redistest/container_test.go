package redistest

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// TestContainerBackend forces the container backend and proves it was taken:
// the server is a container that docker ps lists, from the configured image,
// whose mapped port answers PING; Restart replaces it on the same address; and
// it is gone (not merely stopped) once the test that started it has ended. Where Docker does not answer, or the image
// is missing, it fails saying what to install or build; it never skips.
func TestContainerBackend(t *testing.T) {
	t.Setenv("REDISTEST_BACKEND", "container")
	var id string
	t.Run("server", func(t *testing.T) {
		s := StartOwned(t)
		c, ok := s.backend.(*container)
		if !ok {
			t.Fatalf("backend is %T, want *container", s.backend)
		}
		id = c.current().GetContainerID()
		if id == "" {
			t.Fatal("the container has no ID")
		}
		listed := dockerPS(t, id, false)
		if len(listed) != 1 {
			t.Fatalf("docker ps lists %d containers with ID %s, want 1", len(listed), id)
		}
		if got, want := listed[0].image, containerImage(); got != want {
			t.Errorf("container runs image %q, want %q", got, want)
		}
		_, port, err := net.SplitHostPort(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if want := "6379->" + port; !slices.Contains(listed[0].ports, want) {
			t.Fatalf("Addr %s is not where the container publishes 6379: it publishes %v", s.Addr(), listed[0].ports)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if got, err := s.Client().Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("PING %s = %q, %v; want PONG", s.Addr(), got, err)
		}
		t.Logf("container %.12s from %s at %s", id, listed[0].image, s.Addr())

		// Restart, while it runs, replaces the container on the same address.
		addr := s.Addr()
		s.Restart()
		first := id
		id = c.current().GetContainerID()
		if id == first {
			t.Fatal("Restart kept the container")
		}
		if left := dockerPS(t, first, true); len(left) != 0 {
			t.Errorf("the container before Restart is still there: %s", left[0].state)
		}
		if s.Addr() != addr {
			t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if got, err := s.Client().Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("PING %s after Restart = %q, %v; want PONG", s.Addr(), got, err)
		}
	})
	if id == "" {
		return // the subtest failed before it had a container
	}
	if left := dockerPS(t, id, true); len(left) != 0 {
		t.Fatalf("container %.12s outlived its test: %s", id, left[0].state)
	}
}

// TestContainerImageOverride: REDISTEST_IMAGE names the image, and a missing
// slotcron/ image fails at once with how to build it, instead of a pull that
// no registry answers.
func TestContainerImageOverride(t *testing.T) {
	t.Setenv("REDISTEST_IMAGE", "")
	if got := containerImage(); got != "slotcron/redis:7" {
		t.Fatalf("default image = %q", got)
	}
	t.Setenv("REDISTEST_IMAGE", "redis:7")
	if got := containerImage(); got != "redis:7" {
		t.Fatalf("REDISTEST_IMAGE=redis:7 gives %q", got)
	}
	if err := dockerAnswers(); err != nil {
		t.Fatalf("no Docker daemon answers (%v): install and start Docker (apt-get install docker.io)", err)
	}
	t.Setenv("REDISTEST_IMAGE", "slotcron/redis:no-such-tag")
	start := time.Now()
	_, err := startContainer()
	if err == nil {
		t.Fatal("a container started from an image that is not there")
	}
	for _, want := range []string{"slotcron/redis:no-such-tag", "deploy/images/build.sh redis", "REDISTEST_IMAGE=redis:7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the missing image took %v to report", d)
	}
}

// listed is what docker ps shows of a container: its image, its state, and its
// published ports as "private->public".
type listed struct {
	image, state string
	ports        []string
}

// dockerPS is docker ps (with all: docker ps -a) for one container ID.
func dockerPS(t *testing.T, id string, all bool) []listed {
	t.Helper()
	ctx, cli := dockerClient(t)
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: all, Filters: client.Filters{}.Add("id", id)})
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	var out []listed
	for _, c := range res.Items {
		l := listed{image: c.Image, state: string(c.State)}
		for _, p := range c.Ports {
			if p.PublicPort != 0 {
				l.ports = append(l.ports, strconv.Itoa(int(p.PrivatePort))+"->"+strconv.Itoa(int(p.PublicPort)))
			}
		}
		out = append(out, l)
	}
	return out
}

// dockerClient is a Docker client for one question, and a context that
// bounds it; both end with the test.
func dockerClient(t *testing.T) (context.Context, *testcontainers.DockerClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return ctx, cli
}

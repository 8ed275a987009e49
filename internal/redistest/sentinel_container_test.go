package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestSentinelContainers starts the container deployment and checks what
// worker's TestSentinelFailoverContainers relies on: five containers on a
// network of their own, a master and a replica the sentinels name, a client
// through the sentinels that writes to the master; StopMaster stops the
// master's container and the sentinels promote the replica, which still has
// the write; and once the test has ended no container or network is left.
func TestSentinelContainers(t *testing.T) {
	var ids []string
	var network string
	t.Run("deployment", func(t *testing.T) {
		s := StartSentinelContainers(t)
		for _, n := range append(s.servers, s.sentinels...) {
			ids = append(ids, n.(*netNode).c.GetContainerID())
		}
		network = s.servers[0].(*netNode).network
		for _, id := range ids {
			if listed := dockerPS(t, id, false); len(listed) != 1 || listed[0].image != containerImage() {
				t.Fatalf("docker ps lists %v for container %.12s, want it running %s", listed, id, containerImage())
			}
		}
		master, replica := s.Master(), s.Replica()
		if master != s.servers[0].address() || replica != s.servers[1].address() {
			t.Fatalf("the sentinels name master %s and replica %s, want %s and %s",
				master, replica, s.servers[0].address(), s.servers[1].address())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := s.Client()
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET through the sentinels: %v", err)
		}
		if err := c.Wait(ctx, 1, 5000).Err(); err != nil {
			t.Fatalf("WAIT 1: %v", err)
		}

		began := time.Now()
		from, to := s.StopMaster()
		t.Logf("docker stop of the master %s: the sentinels promoted %s in %v", from, to, time.Since(began).Round(time.Millisecond))
		if from != master || to != replica {
			t.Fatalf("failover from %s to %s, want from %s to the former replica %s", from, to, master, replica)
		}
		if state := containerState(t, ids[0]); state != "exited" {
			t.Errorf("the old master's container is %q, want exited", state)
		}
		if err := role(to, "master"); err != nil {
			t.Fatal(err)
		}
		// The client may spend a few tries on its connections to the stopped
		// master before it asks the sentinels again.
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := c.Get(context.Background(), "k").Result()
			if err == nil && got == "v" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET k through the sentinels after the failover = %q, %v; want v", got, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if len(ids) == 0 {
		return // the subtest failed before it had containers
	}
	for _, id := range ids {
		if left := dockerPS(t, id, true); len(left) != 0 {
			t.Errorf("container %.12s outlived its test: %s", id, left[0].state)
		}
	}
	ctx, cli := dockerClient(t)
	if _, err := cli.NetworkInspect(ctx, network, client.NetworkInspectOptions{}); err == nil {
		t.Errorf("network %s outlived its test", network)
	}
}

// containerState is docker inspect's State.Status of a container.
func containerState(t *testing.T, id string) string {
	t.Helper()
	ctx, cli := dockerClient(t)
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("docker inspect %.12s: %v", id, err)
	}
	return string(res.Container.State.Status)
}

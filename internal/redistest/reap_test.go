//go:build linux

package redistest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// TestContainersOfAKilledRunAreRemoved: with testcontainers-go's reaper
// off, a test binary that is killed leaves its containers and networks
// running. A container and a network labelled by a process that has ended
// are removed by reapOrphans (which the next container start runs); one
// labelled by a live process (this one), or by a process in another PID
// namespace (a test run in a container, whose PIDs this one cannot
// judge), is left alone.
func TestContainersOfAKilledRunAreRemoved(t *testing.T) {
	if err := dockerAnswers(); err != nil {
		t.Fatalf("this test needs a Docker daemon, and none answers (%v): install and start Docker "+
			"(Debian/Ubuntu: apt-get install docker.io)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	image := containerImage()
	if err := imageIsHere(ctx, image); err != nil {
		t.Fatal(err)
	}
	if owner() == "" {
		t.Fatal("no owner label for this process: /proc does not tell its boot ID, PID namespace or start time")
	}

	// A process that has ended, named as it was while it ran.
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	dead := processOwner(sleep.Process.Pid)
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	if dead == "" {
		t.Fatal("no owner label for a running child process")
	}
	ns, _ := os.Readlink("/proc/self/ns/pid")
	elsewhere := strings.Replace(dead, ns, "pid:[1]", 1) // the same PID, in another PID namespace

	start := func(label string) string {
		t.Helper()
		c, err := testcontainers.Run(ctx, image, testcontainers.WithCmd("redis-server", "--save", "", "--appendonly", "no"),
			testcontainers.WithLabels(map[string]string{ownerLabel: label}))
		if err != nil {
			t.Fatalf("start a container: %v", err)
		}
		t.Cleanup(func() { _ = c.Terminate(context.Background()) })
		return c.GetContainerID()
	}
	orphan, mine, foreign := start(dead), start(owner()), start(elsewhere)
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(map[string]string{ownerLabel: dead}))
	if err != nil {
		t.Fatalf("create a network: %v", err)
	}
	t.Cleanup(func() { _ = nw.Remove(context.Background()) })

	// (Another test binary starting its first container meanwhile may
	// remove the orphans first: what is left is what counts.)
	if _, err := reapOrphans(ctx); err != nil {
		t.Fatalf("reapOrphans: %v", err)
	}
	if got := dockerPS(t, orphan, true); len(got) != 0 {
		t.Errorf("the container of a process that has ended is still there: %v", got)
	}
	if got := dockerPS(t, mine, false); len(got) != 1 {
		t.Errorf("the container of this live process was removed (docker ps lists %d)", len(got))
	}
	if got := dockerPS(t, foreign, false); len(got) != 1 {
		t.Errorf("the container of a process in another PID namespace was removed (docker ps lists %d)", len(got))
	}
	cctx, cli := dockerClient(t)
	nws, err := cli.NetworkList(cctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", nw.Name)})
	if err != nil {
		t.Fatalf("docker network ls: %v", err)
	}
	if len(nws.Items) != 0 {
		t.Errorf("the network of a process that has ended is still there")
	}
}

// TestOwnerNamesOneProcess: the owner label changes with the process, and
// a label of this process, or one this process cannot judge, is never
// taken for a process that has ended.
func TestOwnerNamesOneProcess(t *testing.T) {
	me := owner()
	if me == "" {
		t.Fatal("no owner label for this process")
	}
	if ownerGone(me) {
		t.Errorf("ownerGone(%q) for this live process", me)
	}
	f := strings.Fields(me)
	later := strings.Join([]string{f[0], f[1], f[2], f[3] + "1"}, " ") // the same PID, started at another time
	if !ownerGone(later) {
		t.Errorf("ownerGone(%q) = false: a PID taken by another process counts as ended", later)
	}
	for _, label := range []string{"", "garbage", "other-boot " + f[1] + " 1 1", f[0] + " pid:[1] 999999999 1"} {
		if ownerGone(label) {
			t.Errorf("ownerGone(%q) = true; a label of another boot, namespace or form is not this process's to judge", label)
		}
	}
}

//go:build linux

package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// ownerLabel names, on every container and network this package starts, the
// test process that started it: "<boot ID> <PID namespace> <PID> <start
// time>". With testcontainers-go's reaper off (withoutReaper), a test binary
// that is killed (SIGKILL, a -timeout panic, ^C twice) leaves them running;
// the next test binary that starts a container removes those whose process
// is gone (reapOrphans).
const ownerLabel = "io.slotcron.redistest.owner"

// owner is this process's value of ownerLabel, "" where /proc does not
// tell: nothing is labelled, and nothing reaped. (Elsewhere than Linux,
// reap_other.go labels nothing.)
var owner = sync.OnceValue(func() string { return processOwner(os.Getpid()) })

// processOwner is the value of ownerLabel for the process pid, as this
// process sees it, or "" when it cannot be read (no such process).
func processOwner(pid int) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	start, err := startTime(pid)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s %s %d %s", strings.TrimSpace(string(boot)), ns, pid, start)
}

// startTime is field 22 of /proc/<pid>/stat, the process's start in clock
// ticks since boot: with the PID, it names one process, as a PID alone
// may be reused.
func startTime(pid int) (string, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The command, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return "", errors.New("no command in /proc/" + strconv.Itoa(pid) + "/stat")
	}
	fields := strings.Fields(string(stat[i+1:])) // from field 3
	if len(fields) < 20 {
		return "", errors.New("too few fields in /proc/" + strconv.Itoa(pid) + "/stat")
	}
	return fields[19], nil
}

// ownerGone reports whether the process a label value names has ended: only
// for a process of this machine's boot and this PID namespace, whose PID
// no process holds (kill(pid, 0) answers ESRCH), or one started at another
// time holds. Any other value (a test run in another container, on another
// host of the same daemon, or before a reboot) is not ours to judge, nor is
// a PID whose /proc this process cannot read (hidepid, a transient error):
// false.
func ownerGone(label string) bool {
	me := strings.Fields(owner())
	them := strings.Fields(label)
	if len(me) != 4 || len(them) != 4 || me[0] != them[0] || me[1] != them[1] {
		return false
	}
	pid, err := strconv.Atoi(them[2])
	if err != nil || pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	} else if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	start, err := startTime(pid) // the PID is held: by the same process?
	return err == nil && start != them[3]
}

// ownerLabels are the labels of a container or network this process starts.
func ownerLabels() map[string]string {
	if owner() == "" {
		return nil
	}
	return map[string]string{ownerLabel: owner()}
}

// reapOnce removes, once per test binary, before its first container, the
// containers and networks that killed test binaries left behind. A failure
// is reported, never fatal: the tests go on.
var reapOnce = sync.OnceFunc(func() {
	defer func() {
		if r := recover(); r != nil { // testcontainers-go panics in some set-ups with no Docker host
			fmt.Fprintf(os.Stderr, "redistest: cannot remove the containers of killed test runs: %v\n", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	removed, err := reapOrphans(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "redistest: cannot remove the containers of killed test runs: %v\n", err)
	}
	if removed > 0 {
		fmt.Fprintf(os.Stderr, "redistest: removed %d containers and networks that killed test runs left behind\n", removed)
	}
})

// reapOrphans removes the containers (running or not) and then the networks
// labelled by a test process that has ended, and returns how many it
// removed. One that another test binary removes meanwhile is not counted,
// nor an error.
func reapOrphans(ctx context.Context) (int, error) {
	if owner() == "" {
		return 0, nil
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	filters := client.Filters{}.Add("label", ownerLabel)
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	n := 0
	var errs []error
	removed := func(what string, err error) { // one removal's outcome, counted
		switch {
		case cerrdefs.IsNotFound(err): // another test binary was first
		case err != nil:
			errs = append(errs, fmt.Errorf("remove %s: %w", what, err))
		default:
			n++
		}
	}
	for _, c := range cs.Items {
		if ownerGone(c.Labels[ownerLabel]) {
			_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			removed(fmt.Sprintf("container %.12s", c.ID), err)
		}
	}
	nws, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: filters})
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("list networks: %w", err))...)
	}
	for _, nw := range nws.Items {
		if ownerGone(nw.Labels[ownerLabel]) {
			_, err := cli.NetworkRemove(ctx, nw.ID, client.NetworkRemoveOptions{})
			removed("network "+nw.Name, err)
		}
	}
	return n, errors.Join(errs...)
}

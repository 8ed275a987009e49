package redistest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

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

// owner is this process's value of ownerLabel, "" where /proc does not tell
// (not Linux): nothing is labelled, and nothing reaped.
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
	start, ok := startTime(pid)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s %s %d %s", strings.TrimSpace(string(boot)), ns, pid, start)
}

// startTime is field 22 of /proc/<pid>/stat, the process's start in clock
// ticks since boot: with the PID, it names one process, as a PID alone
// may be reused.
func startTime(pid int) (string, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(stat[i+1:])) // from field 3
	if len(fields) < 20 {
		return "", false
	}
	return fields[19], true
}

// ownerGone reports whether the process a label value names has ended: only
// for a process of this machine's boot and this PID namespace, whose PID is
// free or taken by a process started at another time. Any other value (a
// test run in another container, on another host of the same daemon, or
// before a reboot, where the daemon keeps no running container anyway) is
// not ours to judge: false.
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
	start, alive := startTime(pid)
	return !alive || start != them[3]
}

// ownerLabels are the labels of a container or network this process starts.
func ownerLabels() map[string]string {
	if owner() == "" {
		return nil
	}
	return map[string]string{ownerLabel: owner()}
}

// reapOnce removes, once per test binary, before its first container, the
// containers and networks that killed test binaries left behind.
var reapOnce = sync.OnceFunc(func() {
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
// removed.
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
	var errs []string
	for _, c := range cs.Items {
		if !ownerGone(c.Labels[ownerLabel]) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			errs = append(errs, fmt.Sprintf("remove container %.12s: %v", c.ID, err))
			continue
		}
		n++
	}
	nws, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: filters})
	if err != nil {
		return n, fmt.Errorf("list networks: %w", err)
	}
	for _, nw := range nws.Items {
		if !ownerGone(nw.Labels[ownerLabel]) {
			continue
		}
		if _, err := cli.NetworkRemove(ctx, nw.ID, client.NetworkRemoveOptions{}); err != nil {
			errs = append(errs, fmt.Sprintf("remove network %s: %v", nw.Name, err))
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return n, nil
}

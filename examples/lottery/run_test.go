package main

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/gotool"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slotstore"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// buildDemo builds the demo into a temporary directory.
func buildDemo(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "lottery")
	if out, err := gotool.Command("build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// slotLineRE matches a slot's line with a winner; the time is the slot's,
// with its date when the slots span midnight.
var slotLineRE = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+)  winner replica-\d`)

// TestDemoWithMoreReplicasThanTakePart: with 5 replicas, spread routing
// gives a slot to its preferred replica and two hedgers; the others report
// nothing for it. The demo prints each slot's line and its verdict soon
// after the last slot, rather than waiting out its 30 s deadline for
// reports that never come.
func TestDemoWithMoreReplicasThanTakePart(t *testing.T) {
	exe := buildDemo(t)
	out, err := exec.Command(exe, "-replicas", "5", "-slots", "2").CombinedOutput()
	ended := time.Now()
	if err != nil {
		// Its verdict first: a summary that keeps a failure's first lines
		// (../shared/tools/under-load.sh keeps 3) then says why.
		t.Fatalf("%v, ending %q\n%s", err, lastLines(out, 4), out)
	}
	if !strings.Contains(string(out), "2 slots, 2 draws, 0 duplicate draws, 0 missed") {
		t.Fatalf("no good verdict:\n%s", out)
	}
	lines := slotLineRE.FindAllStringSubmatch(string(out), -1)
	if len(lines) != 2 {
		t.Fatalf("want 2 slot lines:\n%s", out)
	}
	last, err := time.Parse("2006-01-02 15:04:05 MST", lines[1][1])
	if err != nil { // the time of day alone: today's, or yesterday's just after midnight
		tod, err := time.ParseInLocation(time.TimeOnly, lines[1][1], time.Local)
		if err != nil {
			t.Fatal(err)
		}
		last = time.Date(ended.Year(), ended.Month(), ended.Day(), tod.Hour(), tod.Minute(), tod.Second(), 0, time.Local)
		if last.After(ended) {
			last = last.AddDate(0, 0, -1)
		}
	}
	if after := ended.Sub(last); after > 20*time.Second {
		t.Errorf("the demo ended %v after its last slot:\n%s", after.Round(time.Second), out)
	}
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) []string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return lines[max(len(lines)-n, 0):]
}

// TestDemoInterrupted: Ctrl-C in a terminal signals the demo and its
// replicas (one process group). The demo stops its replicas, removes its
// keys from a real Redis (and its prefix from the shared registry of
// deployments), says it was interrupted, and exits 130.
func TestDemoInterrupted(t *testing.T) {
	exe := buildDemo(t)
	srv := redistest.Start(t)
	cmd := exec.Command(exe, "-redis", srv.Addr(), "-slots", "20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out []string
	prefix := ""
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out = append(out, sc.Text())
		if m := regexp.MustCompile(`under the fresh key prefix (\S+);`).FindStringSubmatch(sc.Text()); m != nil {
			prefix = m[1]
		}
		if slotLineRE.MatchString(sc.Text()) {
			break
		}
	}
	if prefix == "" || len(out) < 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no prefix or no slot line:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil { // the whole group, as a terminal does
		t.Fatal(err)
	}
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("exit: %v, want status 130\n%s\n%s", err, strings.Join(out, "\n"), stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted after") || !strings.Contains(strings.Join(out, "\n"), "removed the demo's") {
		t.Errorf("output:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
	}
	rdb := srv.Client()
	ctx := context.Background()
	if keys, err := rdb.Keys(ctx, prefix+":*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("keys left under %s: %v %v", prefix, keys, err)
	}
	if ok, err := rdb.HExists(ctx, slotstore.DeploymentsKey, prefix).Result(); err != nil || ok {
		t.Errorf("%s still names %s: %v %v", slotstore.DeploymentsKey, prefix, ok, err)
	}
}

package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/gotool"
	"github.com/slotcron/slotcron/internal/redistest"
)

// TestSecondSignalForcesExit: the first SIGTERM stops claiming and gives the
// running job the shutdown grace (30s here); a job that ignores its context
// keeps the process alive. A second SIGTERM ends it at once, with exit code 1.
func TestSecondSignalForcesExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stuckworker")
	if out, err := gotool.Command("build", "-o", bin, "./testdata/stuckworker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := redistest.Start(t)
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
http:
  listen: ""
shutdown_grace: 30s
jobs:
  - name: stuck
    schedule: "@every 1s"
`, srv.Addr(), "sig"+strconv.Itoa(os.Getpid())))
	cmd := exec.Command(bin, "run", "-config", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "started" {
				close(started)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("the stuck job never started; logs:\n%s", stderr.String())
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		t.Fatalf("exited (%v) on the first signal, with a job running and 30s of grace", err)
	case <-time.After(time.Second):
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("second signal: exit %v, want code 1", err)
		}
	case <-time.After(10 * time.Second): // "at once" against the 30s grace, with room for a busy machine
		t.Fatal("still running 10s after the second signal")
	}
	for _, want := range []string{"stopping: no new claims", "second signal: exiting now"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, stderr.String())
		}
	}
}

package redistest

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAKilledTestsServerStops: a test binary killed before its cleanup
// runs (SIGKILL here; a panic or -timeout ends it as abruptly) takes the
// redis-server it started down with it, rather than leaving it to run on.
func TestAKilledTestsServerStops(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run", "^TestHelperServerOfAKilledTest$", "-test.count", "1")
	child.Env = append(os.Environ(), "REDISTEST_HELPER=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	pid := 0
	lines := bufio.NewScanner(out)
	for pid == 0 && lines.Scan() { // the helper prints its server's PID, then waits to be killed
		if v, ok := strings.CutPrefix(lines.Text(), "redis-server pid "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("the helper test printed no server PID (%v)", lines.Err())
	}
	if !running(pid) {
		t.Fatalf("the helper's redis-server (pid %d) is not running before the helper is killed", pid)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	deadline := time.Now().Add(10 * time.Second) // the kernel signals at once; only a guard against a hang
	for running(pid) {
		if time.Now().After(deadline) {
			_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
			t.Fatalf("the redis-server (pid %d) of a test binary killed 10s ago still runs (killed now)", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHelperServerOfAKilledTest is TestAKilledTestsServerStops's child: run
// by it alone (REDISTEST_HELPER=1), it starts a redis-server, prints its
// PID and waits to be killed; run by go test, it returns at once.
func TestHelperServerOfAKilledTest(t *testing.T) {
	if os.Getenv("REDISTEST_HELPER") != "1" {
		return
	}
	p, err := startProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	os.Stdout.WriteString("redis-server pid " + strconv.Itoa(pid) + "\n")
	time.Sleep(time.Minute)
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

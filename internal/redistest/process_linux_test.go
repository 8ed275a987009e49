package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAKilledTestsServerStops: a test binary killed before its cleanup
// runs (SIGKILL here; a panic or -timeout ends it as abruptly) takes the
// redis-server it started down with it, rather than leaving it to run on.
func TestAKilledTestsServerStops(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run", "^TestHelperServerOfAKilledTest$", "-test.count", "1")
	child.Env = append(os.Environ(), "REDISTEST_HELPER=1")
	var stderr bytes.Buffer
	child.Stderr = &stderr
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
	var said strings.Builder
	for pid == 0 && lines.Scan() { // the helper prints its server's PID, then waits to be killed
		if v, ok := strings.CutPrefix(lines.Text(), "redis-server pid "); ok {
			pid, _ = strconv.Atoi(v)
		}
		said.WriteString(lines.Text() + "\n")
	}
	if pid == 0 {
		_ = child.Wait()
		t.Fatalf("the helper test printed no server PID (%v):\n%s%s", lines.Err(), said.String(), stderr.String())
	}
	born, err := startTime(pid)
	if err != nil || !running(pid) {
		t.Fatalf("the helper's redis-server (pid %d) is not running before the helper is killed (%v)", pid, err)
	}
	// ours: the process of that PID and start time (a PID alone may be reused)
	ours := func() bool {
		st, err := startTime(pid)
		return err == nil && st == born && running(pid)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	deadline := time.Now().Add(10 * time.Second) // the kernel signals at once; only a guard against a hang
	for ours() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
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

// TestAServerOutlivesTheThreadThatStartedIt: the parent's death signal
// follows the thread that forked the server, and Go ends a thread when a
// goroutine locked to it returns still locked. A test whose goroutine does
// that after starting a server (or that runs, after it, on a thread some
// other goroutine locks and ends) must keep its server.
func TestAServerOutlivesTheThreadThatStartedIt(t *testing.T) {
	type started struct {
		p   *process
		tid int
		err error
	}
	ch := make(chan started, 1)
	dir := t.TempDir()
	onAThreadThatEnds(func() {
		p, err := startProcess(dir)
		ch <- started{p, syscall.Gettid(), err}
	})
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	defer s.p.close()
	s.p.mu.Lock()
	pid := s.p.cmd.Process.Pid
	s.p.mu.Unlock()
	// The kernel sends the death signal as the thread exits, before its
	// entry leaves /proc; a SIGKILL'd server answers nothing after that.
	task := "/proc/self/task/" + strconv.Itoa(s.tid)
	deadline := time.Now().Add(10 * time.Second) // Go ends the thread at once; only a guard against a hang
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread %d that started the server still runs 10s after its locked goroutine returned", s.tid)
		}
		time.Sleep(time.Millisecond)
	}
	// A server that is only slow to answer (a busy machine) is asked again;
	// a killed one refuses the connection or resets it.
	got, err := serverPID(s.p.address())
	var slow net.Error
	for asked := time.Now(); err != nil && errors.As(err, &slow) && slow.Timeout() && time.Since(asked) < 10*time.Second; {
		got, err = serverPID(s.p.address())
	}
	if err != nil || got != pid {
		t.Fatalf("the redis-server (pid %d) died with the thread that started it: INFO server answered pid %d, %v", pid, got, err)
	}
}

// onAThreadThatEnds runs f in a goroutine locked to a thread that ends as f
// returns. Go ends a thread whose locked goroutine returns, but for the
// process's main thread, which it parks instead: a goroutine that finds
// itself there holds that thread while f runs in another, then lets it go.
func onAThreadThatEnds(f func()) {
	go func() {
		runtime.LockOSThread()
		if syscall.Gettid() != os.Getpid() {
			f()
			return // still locked: the thread ends
		}
		done := make(chan struct{})
		onAThreadThatEnds(func() {
			defer close(done)
			f()
		})
		<-done
		runtime.UnlockOSThread()
	}()
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

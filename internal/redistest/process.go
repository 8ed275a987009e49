package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a redis-server child process on a loopback port.
type process struct {
	dir  string
	port int
	addr string
	args []string // extra redis-server arguments, such as cluster mode
	// sentinel, when set, makes this a Sentinel: redis-server <sentinel>
	// --sentinel, with sentinel the config file it may rewrite.
	sentinel string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's result once
}

// startProcess starts redis-server with its files in dir.
func startProcess(dir string, extra ...string) (*process, error) {
	var lastErr error
	for range 5 { // a free port can be taken between probing and binding
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p := &process{dir: dir, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), args: extra}
		if lastErr = p.launch(); lastErr == nil {
			return p, nil
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startOnOwnThread starts cmd from a goroutine locked to its OS thread
// until cmd has exited, and returns the channel that receives Wait's
// result. The parent's death signal (dieWithTest) follows the thread that
// forked, not the process: on a thread any goroutine may run on, a
// goroutine of the test binary that locked it and returned still locked
// would end the thread, and the server with it, mid-test.
func startOnOwnThread(cmd *exec.Cmd) (chan error, error) {
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// launch starts redis-server and waits until it accepts connections.
func (p *process) launch() error {
	args := append([]string{
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--dir", p.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", filepath.Join(p.dir, "redis.log"),
	}, p.args...)
	if p.sentinel != "" {
		args = append([]string{p.sentinel, "--sentinel", "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
			"--dir", p.dir, "--daemonize", "no", "--logfile", filepath.Join(p.dir, "redis.log")}, p.args...)
	}
	cmd := exec.Command("redis-server", args...)
	dieWithTest(cmd)
	exited, err := startOnOwnThread(cmd)
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited (%v): %s", p.port, err, lastLines(log, 5))
		default:
		}
		if pid, err := serverPID(p.addr); err == nil {
			if pid != cmd.Process.Pid {
				// Another process took the port between freePort and our
				// bind (another test run's server): ours fails to bind.
				_ = cmd.Process.Kill()
				<-exited
				return fmt.Errorf("port %d is taken by process %d", p.port, pid)
			}
			p.mu.Lock()
			p.cmd, p.exited = cmd, exited
			p.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not listen within 10s", p.port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *process) address() string { return p.addr }

// serverPID asks the Redis server (or Sentinel) at addr for its process ID.
func serverPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO server: %q", strings.TrimSpace(head)) // -LOADING and the like: not ready yet
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, fmt.Errorf("INFO server: %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server: no process_id")
}

func (p *process) stop() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("server is not running")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL also ends a SIGSTOPped process
		return err
	}
	<-exited // reaped: the listening socket is closed, so restart can bind the port
	return nil
}

func (p *process) restart() error {
	p.mu.Lock()
	running := p.cmd != nil
	p.mu.Unlock()
	if running {
		if err := p.stop(); err != nil {
			return err
		}
	}
	return p.launch()
}

func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("server is not running")
	}
	return p.cmd.Process.Signal(sig)
}

func (p *process) pause() error  { return p.signal(syscall.SIGSTOP) }
func (p *process) resume() error { return p.signal(syscall.SIGCONT) }

func (p *process) close() {
	p.mu.Lock()
	running := p.cmd != nil
	p.mu.Unlock()
	if running {
		_ = p.stop()
	}
}

func lastLines(b []byte, n int) string {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines > n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited (%v): %s", p.port, err, lastLines(log, 5))
		default:
		}
		if c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond); err == nil {
			c.Close()
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

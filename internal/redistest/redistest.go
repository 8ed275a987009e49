// Package redistest gives tests a real Redis.
//
// # Where the server comes from
//
// Start resolves a server in this order:
//
//  1. REDIS_ADDR, when set: a shared server. The test gets a fresh key prefix
//     (Server.Key) and its keys are deleted when the test ends. Nothing else on
//     that server is touched; it is never flushed.
//  2. a redis-server process on a free loopback port, with its own directory and
//     no persistence (--save "" --appendonly no), killed when the test ends;
//  3. a container through testcontainers-go, when a Docker daemon answers: the
//     image slotcron/redis:7 (Debian's redis-server; deploy/images/build.sh
//     builds it with no registry), or REDISTEST_IMAGE, e.g. redis:7;
//  4. otherwise the test fails with a message naming the three ways to provide
//     Redis. It never skips.
//
// REDISTEST_BACKEND=process or REDISTEST_BACKEND=container replaces steps 2
// and 3: every server this package starts is of that kind, and when it can't
// be had the test fails saying what to install. REDIS_ADDR still serves Start.
//
// StartOwned skips step 1: use it for tests that stop, restart or pause the
// server, which a shared server does not allow.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Server is a Redis server that belongs to one test.
type Server struct {
	t      testing.TB
	prefix string
	shared bool

	addr    string     // a shared server's address
	backend controller // nil for a shared server

	mu      sync.Mutex
	clients []*redis.Client
}

// controller is what a server this package started can do to itself.
type controller interface {
	address() string
	stop() error
	restart() error
	pause() error
	resume() error
	close()
}

// Start returns a running server for t, resolved as the package doc says.
// The server, its clients and (on a shared server) its keys are gone when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartOwned returns a server that t owns alone, so it can Stop, Restart, Pause
// and Resume it. It ignores REDIS_ADDR.
func StartOwned(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

// StartN returns n independent owned servers, for Redlock.
func StartN(t testing.TB, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = StartOwned(t)
	}
	return servers
}

func start(t testing.TB, owned bool) *Server {
	t.Helper()
	s, err := launch(owned, t.TempDir)
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.cleanup)
	if err := s.ping(10 * time.Second); err != nil {
		t.Fatalf("redistest: server at %s does not answer: %v", s.Addr(), err)
	}
	return s
}

// launch resolves and starts a server; tempDir gives the process its directory.
func launch(owned bool, tempDir func() string) (*Server, error) {
	b, err := choose(systemProbes(), owned)
	if err != nil {
		return nil, err
	}
	s := &Server{prefix: "rt" + randomHex(4) + ":"}
	switch b {
	case backendShared:
		s.addr, s.shared = os.Getenv("REDIS_ADDR"), true
	case backendProcess:
		p, err := startProcess(tempDir())
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		s.backend = p
	case backendContainer:
		c, err := startContainer()
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		s.backend = c
	}
	return s, nil
}

// Main is a package's TestMain: it starts a server for the package's
// Example functions (its address goes to *addr, when addr is not nil), runs
// the tests, stops the server, and then fails the run if goroutines leaked.
func Main(m *testing.M, addr *string) {
	os.Exit(runMain(m, addr))
}

func runMain(m *testing.M, addr *string) int {
	quietRedis()
	if addr != nil {
		dir, err := os.MkdirTemp("", "redistest")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		s, err := launch(false, func() string { return dir })
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := s.ping(10 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: server at %s does not answer: %v\n", s.Addr(), err)
			return 1
		}
		*addr = s.Addr()
		code := m.Run()
		s.cleanup()
		return checkLeaks(code)
	}
	return checkLeaks(m.Run())
}

// quietRedis silences go-redis's own logger (reconnects, pool errors, the
// maintenance-notification probe), which prints to stderr on its own and
// drowns the failure that matters. The tests check errors where they happen.
func quietRedis() { redis.SetLogger(discardLogger{}) }

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// checkLeaks fails a passing run whose goroutines outlived its tests.
func checkLeaks(code int) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
		return 1
	}
	return 0
}

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	if s.backend != nil {
		return s.backend.address()
	}
	return s.addr
}

// Key returns name under this server's per-test prefix. Use it for every key a
// test writes, so that tests sharing a REDIS_ADDR server never collide.
func (s *Server) Key(name string) string { return s.prefix + name }

// Prefix returns the per-test key prefix that Key uses.
func (s *Server) Prefix() string { return s.prefix }

// Options returns client options for this server: short timeouts, and context
// deadlines honoured on the socket, so a paused server fails calls quickly.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:                  s.Addr(),
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
}

// Client returns a new client for this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.Options())
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Stop stops the server. Clients get connection errors until Restart.
func (s *Server) Stop() { s.control("Stop", controller.stop) }

// Restart starts the server again on the same address with no data.
func (s *Server) Restart() {
	s.control("Restart", controller.restart)
	if err := s.ping(10 * time.Second); err != nil {
		s.t.Fatalf("redistest: Restart: server does not answer: %v", err)
	}
}

// Pause freezes the server (SIGSTOP, or docker pause): connections stay open
// and every call hangs until Resume.
func (s *Server) Pause() { s.control("Pause", controller.pause) }

// Resume undoes Pause.
func (s *Server) Resume() { s.control("Resume", controller.resume) }

func (s *Server) control(name string, f func(controller) error) {
	s.t.Helper()
	if s.backend == nil {
		s.t.Fatalf("redistest: %s needs a server the test owns; this one is shared (REDIS_ADDR): use StartOwned", name)
	}
	if err := f(s.backend); err != nil {
		s.t.Fatalf("redistest: %s: %v", name, err)
	}
}

func (s *Server) ping(within time.Duration) error {
	c := redis.NewClient(s.Options())
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) cleanup() {
	s.mu.Lock()
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	if s.shared {
		s.deleteOwnKeys()
		return
	}
	s.backend.close()
}

// deleteOwnKeys removes this test's keys from a shared server, on a fresh context.
func (s *Server) deleteOwnKeys() {
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, s.prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		if err := c.Unlink(ctx, iter.Val()).Err(); err != nil {
			s.logf("redistest: cleanup of %s: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		s.logf("redistest: cleanup scan: %v", err)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.t != nil {
		s.t.Logf(format, args...)
		return
	}
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

type backend int

const (
	backendShared backend = iota
	backendProcess
	backendContainer
)

// probes are the facts choose decides on, as functions so that tests can fake them.
type probes struct {
	getenv   func(string) string
	lookPath func(string) (string, error)
	docker   func() error // nil when a Docker daemon answers
}

func systemProbes() probes {
	return probes{getenv: os.Getenv, lookPath: exec.LookPath, docker: dockerAnswers}
}

// choose picks the backend in the documented order, or the one that
// REDISTEST_BACKEND names, or returns the error that names every way to
// provide Redis.
func choose(p probes, owned bool) (backend, error) {
	if !owned && p.getenv("REDIS_ADDR") != "" {
		return backendShared, nil
	}
	switch forced := p.getenv("REDISTEST_BACKEND"); forced {
	case "":
	case "process":
		if _, err := p.lookPath("redis-server"); err != nil {
			return 0, fmt.Errorf("redistest: REDISTEST_BACKEND=process, but redis-server is not on PATH (%v); "+
				"install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)", err)
		}
		return backendProcess, nil
	case "container":
		if err := p.docker(); err != nil {
			return 0, fmt.Errorf("redistest: REDISTEST_BACKEND=container, but no Docker daemon answers (%v); "+
				"install and start Docker (Debian/Ubuntu: apt-get install docker.io; macOS: Docker Desktop), "+
				"then build the image: deploy/images/build.sh redis", err)
		}
		return backendContainer, nil
	default:
		return 0, fmt.Errorf("redistest: REDISTEST_BACKEND=%q: want process, container, or unset for the usual order", forced)
	}
	if _, err := p.lookPath("redis-server"); err == nil {
		return backendProcess, nil
	}
	dockerErr := p.docker()
	if dockerErr == nil {
		return backendContainer, nil
	}
	var b strings.Builder
	b.WriteString("redistest: no Redis available for this test. Provide one of:\n")
	if owned {
		b.WriteString("  1. REDIS_ADDR=host:port (not usable here: this test stops or pauses its server)\n")
	} else {
		b.WriteString("  1. REDIS_ADDR=host:port, a Redis the tests may write prefixed keys to\n")
	}
	b.WriteString("  2. redis-server on PATH (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)\n")
	fmt.Fprintf(&b, "  3. a running Docker daemon, for testcontainers-go (it said: %v), and the image %s\n", dockerErr, defaultImage)
	b.WriteString("     (deploy/images/build.sh redis builds it; or REDISTEST_IMAGE=redis:7 where Docker Hub is reachable)")
	return 0, errors.New(b.String())
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}

// CommandTime reads, from the text of INFO commandstats, the time Redis spent
// in cmd (lower case, as INFO names it; a script's time includes the
// commands it called); ok is false when cmd has no line or an unreadable one.
func CommandTime(stats, cmd string) (d time.Duration, ok bool) {
	_, line, found := strings.Cut(stats, "cmdstat_"+cmd+":")
	if !found {
		return 0, false
	}
	_, usec, _ := strings.Cut(line, "usec=")
	usec, _, _ = strings.Cut(usec, ",")
	n, err := strconv.ParseInt(usec, 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Microsecond, true
}

//go:build compose

package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/otlptest"
)

// stack is one run of deploy/compose.yaml under a project name of its own,
// with every published port moved to a free one on 127.0.0.1 and Redis
// published there too, so that the test reads it. It touches no container
// of another project.
type stack struct {
	t       *testing.T
	compose []string // docker compose, or docker-compose
	project string
	files   []string
	env     []string
	network string            // the project's network, once up
	ids     map[string]string // service -> container ID, as looked up
}

// needDocker fails the test, saying what to install, unless the docker CLI
// and its daemon answer and a Compose (v2's plugin, or v1's docker-compose)
// is installed. It returns the Compose command.
func needDocker(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Fatal("docker is not installed: install Docker Engine (Debian: apt-get install docker.io) and start it; " +
			"this test runs deploy/compose.yaml and cannot run without it")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("the Docker daemon does not answer (docker info: %v: %s): start it (systemctl start docker) "+
			"and run the test as a user allowed to use it (root, or the docker group)", err, bytes.TrimSpace(out))
	}
	for _, compose := range [][]string{{"docker", "compose"}, {"docker-compose"}} {
		if out, err := exec.Command(compose[0], append(compose[1:], "version", "--short")...).Output(); err == nil {
			t.Logf("Compose: %s %s", strings.Join(compose, " "), bytes.TrimSpace(out))
			return compose
		}
	}
	t.Fatal("no Compose: install Compose v2 (the docker-compose-plugin package of Docker's apt repository, " +
		"or Debian's docker-compose-v2 where it exists) or v1 (Debian: apt-get install docker-compose)")
	return nil
}

// buildImages runs deploy/images/build.sh for the worker, always: it skips
// an image whose inputs are unchanged (a few seconds), and otherwise the test
// would run an image built from other sources than these. With withJaeger,
// Jaeger's image is built too when it is missing (its first build takes 6 to
// 12 minutes: jaeger.sh builds Jaeger from source). It fails the test when
// an image the stack needs is still missing.
func buildImages(t *testing.T, withJaeger bool) {
	t.Helper()
	targets := []string{"worker"}
	need := []string{workerImage, redisImage}
	if withJaeger {
		need = append(need, jaegerImage)
		if !imageExists(jaegerImage) {
			targets = append(targets, "jaeger")
		}
	}
	began := time.Now()
	cmd := exec.Command(filepath.Join("images", "build.sh"), targets...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/images/build.sh %s: %v\n%s", strings.Join(targets, " "), err, out)
	}
	t.Logf("deploy/images/build.sh %s: %v", strings.Join(targets, " "), time.Since(began).Round(100*time.Millisecond))
	for _, img := range need {
		if !imageExists(img) {
			t.Fatalf("the image %s is missing after deploy/images/build.sh %s; its output:\n%s", img, strings.Join(targets, " "), out)
		}
	}
}

func imageExists(ref string) bool {
	return exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", ref).Run() == nil
}

// startStack brings compose.yaml up under a new project name, with every
// port variable of portVars set to 127.0.0.1:0 and Redis published on a
// free port of 127.0.0.1. Without a collector, it starts the whole stack as
// it ships. With one, it starts Redis and the services in workers alone (not
// Jaeger); each worker exports its traces to the collector on the host
// (host.docker.internal, Docker's host-gateway) through a copy of config
// (the workers' config file) whose tracing endpoint is that. Cleanup brings
// it down with its volume, after logging the end of each service's log if
// the test failed.
func startStack(t *testing.T, composeCmd []string, portVars []string, workers []string, config string, collector *otlptest.Collector) *stack {
	t.Helper()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	s := &stack{t: t, compose: composeCmd, project: "slotcron-stacktest-" + hex.EncodeToString(suffix),
		ids: map[string]string{}}
	dir := t.TempDir()
	// Publishing Redis adds a port; Compose concatenates override ports.
	override := "services:\n  redis:\n    ports: [\"127.0.0.1:0:6379\"]\n"
	up := []string{"up", "-d"}
	if collector != nil {
		_, port, err := net.SplitHostPort(collector.Addr)
		if err != nil {
			t.Fatal(err)
		}
		const endpoint = "endpoint: jaeger:4317"
		if strings.Count(config, endpoint) != 1 {
			t.Fatalf("compose/worker.yaml: want one %q, the line this test points at its own collector", endpoint)
		}
		cfgPath := filepath.Join(dir, "worker.yaml")
		if err := os.WriteFile(cfgPath, []byte(strings.Replace(config, endpoint, "endpoint: host.docker.internal:"+port, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		// Compose merges a service's volumes by their path in the
		// container: this one replaces compose/worker.yaml's mount.
		for _, w := range workers {
			override += fmt.Sprintf("  %s:\n    extra_hosts: [\"host.docker.internal:host-gateway\"]\n    volumes: [%q]\n",
				w, cfgPath+":/etc/slotcron/config.yaml:ro")
		}
		// Every service but Jaeger, which the workers depend on.
		up = append(append(up, "--no-deps", "redis"), workers...)
	}
	path := filepath.Join(dir, "test.yaml")
	if err := os.WriteFile(path, []byte(override), 0o644); err != nil {
		t.Fatal(err)
	}
	s.files = []string{"compose.yaml", path}
	for _, v := range portVars {
		s.env = append(s.env, v+"=127.0.0.1:0")
	}
	t.Cleanup(func() {
		if t.Failed() {
			if out, err := s.run(2*time.Minute, "logs", "--no-color", "--tail", "40"); err == nil {
				t.Logf("the stack's logs, last 40 lines of each service:\n%s", out)
			}
		}
		began := time.Now()
		if out, err := s.run(3*time.Minute, "down", "-v", "--timeout", "30"); err != nil {
			t.Errorf("%s down -v: %v\n%s", strings.Join(s.compose, " "), err, out)
		}
		t.Logf("down -v: %v", time.Since(began).Round(100*time.Millisecond))
	})
	began := time.Now()
	if out, err := s.run(3*time.Minute, up...); err != nil {
		t.Fatalf("%s -p %s %s: %v\n%s", strings.Join(s.compose, " "), s.project, strings.Join(up, " "), err, out)
	}
	t.Logf("project %s %s: %v", s.project, strings.Join(up, " "), time.Since(began).Round(100*time.Millisecond))
	nets := strings.Fields(s.docker("inspect", "-f", `{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}`, s.container("redis")))
	if len(nets) != 1 {
		t.Fatalf("redis is on networks %q, want the project's one", nets)
	}
	s.network = nets[0]
	return s
}

// run runs a Compose command on the stack and returns its output (stdout
// and stderr).
func (s *stack) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := slices.Concat(s.compose[1:], []string{"-p", s.project})
	for _, f := range s.files {
		full = append(full, "-f", f)
	}
	cmd := exec.CommandContext(ctx, s.compose[0], append(full, args...)...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// docker runs a docker command and returns its stdout, failing the test
// if it fails.
func (s *stack) docker(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out))
}

// container returns the ID of a service's container. It looks it up once:
// a reconnect keeps it.
func (s *stack) container(service string) string {
	s.t.Helper()
	if id, ok := s.ids[service]; ok {
		return id
	}
	out, err := s.run(time.Minute, "ps", "-q", service)
	id := strings.TrimSpace(out)
	if err != nil || id == "" || strings.ContainsAny(id, " \n") {
		s.t.Fatalf("the container of %s: %v: %q", service, err, out)
	}
	s.ids[service] = id
	return id
}

// addr returns the host address a service's port is published on. Ask
// again after a reconnect: the port changes.
func (s *stack) addr(service string, port int) string {
	s.t.Helper()
	out, err := s.run(time.Minute, "port", service, fmt.Sprint(port))
	a := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
		s.t.Fatalf("the published address of %s:%d: %v: %q", service, port, err, out)
	}
	return a
}

// disconnect cuts a service's container off the project's network: from
// Redis, Jaeger or the test's trace receiver, and the host. Established
// connections are not reset; they hang, as they would behind a partition.
func (s *stack) disconnect(service string) {
	s.t.Helper()
	s.docker("network", "disconnect", s.network, s.container(service))
}

// connect puts it back, under its service name as Compose did.
func (s *stack) connect(service string) {
	s.t.Helper()
	s.docker("network", "connect", "--alias", service, s.network, s.container(service))
}

// started returns when a service's container last started, and how often
// Docker restarted it.
func (s *stack) started(service string) string {
	s.t.Helper()
	return s.docker("inspect", "-f", "{{.State.StartedAt}} restarts={{.RestartCount}} pid={{.State.Pid}}", s.container(service))
}

// logLine is one line of a worker's JSON log (log/slog).
type logLine struct {
	Time  time.Time
	Msg   string
	Attrs map[string]any
}

func (l logLine) attr(k string) string {
	if v, ok := l.Attrs[k]; ok {
		return fmt.Sprint(v)
	}
	return ""
}

// logs reads a service's log (the worker logs JSON to stderr); lines that
// are not JSON objects are left out.
func (s *stack) logs(service string) []logLine {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "logs", s.container(service)).CombinedOutput()
	if err != nil {
		s.t.Fatalf("docker logs %s: %v", service, err)
	}
	var lines []logLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"]))
		msg, _ := m["msg"].(string)
		lines = append(lines, logLine{Time: at, Msg: msg, Attrs: m})
	}
	return lines
}

// ready reports whether a worker's /readyz answers 200, and what it said.
func ready(addr string) (bool, string) {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(b.String()))
}

// eventually polls cond every 200ms until it holds or d has passed, and
// reports whether it held.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sleepUntil sleeps until t.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

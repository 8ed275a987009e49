package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
)

// The processes of a chaos run: Redis and the workers.

// redisServer is a redis-server process with appendonly on.
type redisServer struct {
	dir  string
	port int
	cmd  *exec.Cmd
}

func (r *redisServer) start() {
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		fail("redis-server: %v (apt-get install redis-server)", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(r.port)})
		err := c.Ping(context.Background()).Err()
		c.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			fail("redis-server did not answer within 10s: %v", err)
		}
	}
}

func (r *redisServer) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// worker is one cmd/worker process, reaching Redis through its proxy.
type worker struct {
	id, bin, dir string
	proxy        *toxiproxy.Proxy
	cmd          *exec.Cmd
	done         chan struct{}
}

func (w *worker) config() string  { return filepath.Join(w.dir, w.id+".yaml") }
func (w *worker) logPath() string { return filepath.Join(w.dir, w.id+".log") }

func (w *worker) writeConfig() {
	body := fmt.Sprintf(`replica_id: %s
redis:
  addrs: [%q]
  key_prefix: %s
lease:
  ttl: 3s
http:
  listen: ""
shutdown_grace: 5s
jobs:
  - name: lottery
    schedule: "@every 1s"
`, w.id, w.proxy.Listen, prefix)
	if err := os.WriteFile(w.config(), []byte(body), 0o600); err != nil {
		fail("%v", err)
	}
}

func (w *worker) start() {
	f, err := os.OpenFile(w.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fail("%v", err)
	}
	w.cmd = exec.Command(w.bin, "run", "-config", w.config())
	w.cmd.Stderr = f
	if err := w.cmd.Start(); err != nil {
		fail("start %s: %v", w.id, err)
	}
	w.done = make(chan struct{})
	go func() { w.cmd.Wait(); f.Close(); close(w.done) }()
}

func (w *worker) signal(sig syscall.Signal) {
	if w.cmd != nil && w.cmd.Process != nil {
		w.cmd.Process.Signal(sig)
	}
}

func (w *worker) wait() {
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		w.signal(syscall.SIGKILL)
		<-w.done
	}
}

// partition drops every byte between the worker and Redis, or lets them
// through again.
func (w *worker) partition(on bool) {
	for _, stream := range []string{"upstream", "downstream"} {
		var err error
		if on {
			spec := fmt.Sprintf(`{"name":"cut-%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, stream, stream)
			_, err = w.proxy.Toxics.AddToxicJson(strings.NewReader(spec))
		} else {
			err = w.proxy.Toxics.RemoveToxic(context.Background(), "cut-"+stream)
		}
		if err != nil {
			fail("partition %s: %v", w.id, err)
		}
	}
}

// starts returns the slot of every "job started" line in the worker's log.
func (w *worker) starts() []int64 {
	f, err := os.Open(w.logPath())
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != "job started" {
			continue
		}
		if t, err := time.Parse(time.RFC3339, fmt.Sprint(line["slotcron.slot"])); err == nil {
			out = append(out, t.Unix())
		}
	}
	return out
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

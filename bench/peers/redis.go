package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server this program started on a free port, with no
// persistence, and a client of its own for INFO that sends nothing else.
type redisServer struct {
	addr  string
	cmd   *exec.Cmd
	admin *redis.Client
}

// startRedis starts redis-server on a free port of 127.0.0.1 and waits until
// it answers PING. The caller stops it with stop.
func startRedis(ctx context.Context) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install redis-server, brew install redis): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "peers-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", dir+"/redis.log")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	s.admin = redis.NewClient(&redis.Options{Addr: s.addr})
	go func() { cmd.Wait(); os.RemoveAll(dir) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := s.admin.Ping(ctx).Err(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s does not answer: %w", s.addr, err)
		}
	}
}

func (s *redisServer) stop() {
	s.admin.Close()
	s.cmd.Process.Kill()
}

// version is redis-server's version, from INFO server.
func (s *redisServer) version(ctx context.Context) string {
	info, err := s.admin.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// commands is the number of commands Redis has run since it started, from
// INFO commandstats: the sum of every command's calls, the commands that Lua
// scripts call included (Redis counts them as it counts a client's). The
// INFO that asks is not in its own answer, but is in the next one's:
// between two calls, subtract 1.
func (s *redisServer) commands(ctx context.Context) (int64, error) {
	info, err := s.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, stats, _ := strings.Cut(line, ":")
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				total += n
			}
		}
	}
	return total, nil
}

// flush empties Redis between scenarios, so none sees another's keys.
func (s *redisServer) flush(ctx context.Context) error {
	return s.admin.FlushAll(ctx).Err()
}

// client returns a new client of the server that counts, in sent, the
// commands it sends: each command of a pipeline, and each of a script's
// EVALSHA and EVAL fallback. The commands a new connection sends to set
// itself up (HELLO, CLIENT SETINFO) do not pass through hooks.
func (s *redisServer) client(sent *atomic.Int64) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	rdb.AddHook(sendCounter{sent})
	return rdb
}

type sendCounter struct{ n *atomic.Int64 }

func (c sendCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c sendCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c sendCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

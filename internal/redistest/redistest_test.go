package redistest

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func fakeProbes(env string, hasRedisServer bool, dockerErr error) probes {
	return fakeProbesEnv(map[string]string{"REDIS_ADDR": env}, hasRedisServer, dockerErr)
}

func fakeProbesEnv(env map[string]string, hasRedisServer bool, dockerErr error) probes {
	return probes{
		getenv: func(k string) string { return env[k] },
		lookPath: func(string) (string, error) {
			if hasRedisServer {
				return "/usr/bin/redis-server", nil
			}
			return "", exec.ErrNotFound
		},
		docker: func() error { return dockerErr },
	}
}

func TestChooseOrder(t *testing.T) {
	noDocker := errors.New("Cannot connect to the Docker daemon")
	tests := []struct {
		name      string
		env       string
		server    bool
		dockerErr error
		owned     bool
		want      backend
	}{
		{"REDIS_ADDR wins", "10.0.0.1:6379", true, nil, false, backendShared},
		{"owned ignores REDIS_ADDR", "10.0.0.1:6379", true, nil, true, backendProcess},
		{"redis-server before docker", "", true, nil, false, backendProcess},
		{"docker last", "", false, nil, false, backendContainer},
		{"owned falls to docker", "10.0.0.1:6379", false, nil, true, backendContainer},
		{"process even when docker is down", "", true, noDocker, false, backendProcess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := choose(fakeProbes(tt.env, tt.server, tt.dockerErr), tt.owned)
			if err != nil {
				t.Fatalf("choose: %v", err)
			}
			if got != tt.want {
				t.Fatalf("choose = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestChooseForced: REDISTEST_BACKEND takes its backend over the usual order
// (REDIS_ADDR still serves Start), and fails, naming what to install, when
// that backend is missing.
func TestChooseForced(t *testing.T) {
	noDocker := errors.New("Cannot connect to the Docker daemon")
	const unset = backend(-1) // an error is wanted
	tests := []struct {
		name             string
		env              map[string]string
		server           bool
		dockerErr        error
		wantStart, owned backend
		wantErr          []string // what the error must mention
	}{
		{"container over redis-server", map[string]string{"REDISTEST_BACKEND": "container"}, true, nil, backendContainer, backendContainer, nil},
		{"REDIS_ADDR still serves Start", map[string]string{"REDISTEST_BACKEND": "container", "REDIS_ADDR": "10.0.0.1:6379"}, true, nil, backendShared, backendContainer, nil},
		{"process over docker", map[string]string{"REDISTEST_BACKEND": "process"}, true, nil, backendProcess, backendProcess, nil},
		{"container without docker", map[string]string{"REDISTEST_BACKEND": "container"}, true, noDocker, unset, unset,
			[]string{"REDISTEST_BACKEND=container", "Cannot connect", "apt-get install docker.io", "deploy/images/build.sh redis"}},
		{"process without redis-server", map[string]string{"REDISTEST_BACKEND": "process"}, false, nil, unset, unset,
			[]string{"REDISTEST_BACKEND=process", "apt-get install redis-server"}},
		{"unknown", map[string]string{"REDISTEST_BACKEND": "docker"}, true, nil, unset, unset,
			[]string{`REDISTEST_BACKEND="docker"`, "process, container"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for owned, want := range map[bool]backend{false: tt.wantStart, true: tt.owned} {
				got, err := choose(fakeProbesEnv(tt.env, tt.server, tt.dockerErr), owned)
				if want != unset {
					if err != nil || got != want {
						t.Errorf("owned=%v: choose = %d, %v; want %d", owned, got, err, want)
					}
					continue
				}
				if err == nil {
					t.Fatalf("owned=%v: choose = %d, want an error", owned, got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("owned=%v: error does not mention %q:\n%v", owned, w, err)
					}
				}
			}
		})
	}
}

func TestChooseNothingNamesEveryWay(t *testing.T) {
	_, err := choose(fakeProbes("", false, errors.New("dial unix /var/run/docker.sock: no such file")), false)
	if err == nil {
		t.Fatal("choose found a backend where there is none")
	}
	for _, want := range []string{"REDIS_ADDR", "redis-server", "apt-get install redis-server", "Docker", "docker.sock", "slotcron/redis:7", "deploy/images/build.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

// TestDockerProbeAnswers runs the real probe: on this machine it must answer
// (yes or no) within its timeout and never panic.
func TestDockerProbeAnswers(t *testing.T) {
	start := time.Now()
	err := dockerAnswers()
	t.Logf("docker probe: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	if time.Since(start) > 10*time.Second {
		t.Fatalf("docker probe took %v", time.Since(start))
	}
}

// TestSharedServerCleanup: on a REDIS_ADDR server a test's own keys are gone
// when it ends, and nothing else on the server is touched (never flushed).
func TestSharedServerCleanup(t *testing.T) {
	owner := StartOwned(t)
	admin := owner.Client()
	ctx := context.Background()
	if err := admin.Set(ctx, "someone-elses", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REDIS_ADDR", owner.Addr())
	var keys []string
	t.Run("a test on the shared server", func(t *testing.T) {
		s := Start(t)
		if s.backend != nil {
			t.Fatal("Start ignored REDIS_ADDR")
		}
		c := s.Client()
		for i := range 700 { // more than one SCAN page
			k := s.Key("k" + strconv.Itoa(i))
			keys = append(keys, k)
			if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n := admin.Exists(ctx, keys...).Val(); n != 0 {
		t.Fatalf("%d of the test's %d keys survived it", n, len(keys))
	}
	if got := admin.Get(ctx, "someone-elses").Val(); got != "kept" {
		t.Fatalf("a key the test did not write is %q", got)
	}
}

func TestOwnedServerControl(t *testing.T) {
	s := StartOwned(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()

	s.Pause()
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Ping(pctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING answered while the server was paused")
	}
	s.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	n, err := c.Exists(ctx, "k").Result()
	if err != nil {
		t.Fatalf("EXISTS after Restart: %v", err)
	}
	if n != 0 {
		t.Fatal("data survived Restart")
	}
}

func TestStartNIndependent(t *testing.T) {
	servers := StartN(t, 3)
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.Addr()] {
			t.Fatalf("server %d shares address %s", i, s.Addr())
		}
		seen[s.Addr()] = true
		if err := s.Client().Set(context.Background(), "who", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range servers {
		if got, _ := s.Client().Get(context.Background(), "who").Int(); got != i {
			t.Fatalf("server %d holds who=%d", i, got)
		}
	}
}

func TestClusterServesEverySlot(t *testing.T) {
	c := StartCluster(t)
	rdb := c.Client()
	ctx := context.Background()
	// Keys spread over all three masters; each must be writable and readable.
	shards := map[string]bool{}
	for i := range 30 {
		key := "k" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		master, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		shards[master.Options().Addr] = true
	}
	if len(shards) != 3 {
		t.Fatalf("keys landed on %d masters, want 3", len(shards))
	}
}

func TestProxyFreezeAndThaw(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr())
	opts := s.Options()
	opts.Addr = p.Addr()
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	p.Freeze()
	fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Ping(fctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING answered through a frozen proxy")
	}
	p.Thaw()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Thaw: %v", err)
	}
}

// TestSentinelFailover: the deployment starts in sync, a failover client
// writes through the sentinels, and after a forced failover the same client
// reaches the new master and reads what was written before.
func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t)
	ctx := context.Background()
	c := s.Client()
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "WAIT", 1, 1000) // replicated before the failover
	from, to := s.Failover()
	if from == to {
		t.Fatalf("failover kept the master at %s", from)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := c.Get(ctx, "k").Result()
		if err == nil && v == "before" {
			if err := c.Set(ctx, "k", "after", 0).Err(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover client did not reach the new master %s: %v %q", to, err, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("failover from %s to %s", from, to)
}

func TestCommandTime(t *testing.T) {
	stats := "# Commandstats\r\ncmdstat_hmget:calls=8,usec=12,usec_per_call=1.50\r\ncmdstat_evalsha:calls=3,usec=900,usec_per_call=300.00,rejected_calls=0\r\n"
	if d, ok := CommandTime(stats, "evalsha"); !ok || d != 900*time.Microsecond {
		t.Fatalf("evalsha: %v %v, want 900µs", d, ok)
	}
	if d, ok := CommandTime(stats, "hmget"); !ok || d != 12*time.Microsecond {
		t.Fatalf("hmget: %v %v, want 12µs", d, ok)
	}
	if _, ok := CommandTime(stats, "get"); ok {
		t.Fatal("get has no line, want ok false")
	}
}

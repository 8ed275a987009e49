package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestPauseCommand: three workers run a job every second on a real Redis.
// worker pause stops it on all of them: each slot from then on is recorded
// paused, with the note, and runs nowhere; status says so. worker resume
// lets the next slots run.
func TestPauseCommand(t *testing.T) {
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: pz
http:
  listen: ""
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "@every 1s"
`, srv.Addr()))
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			return env.Redis.RPush(ctx, "pz:ran", run.Slot.Unix()).Err()
		})
	}
	startWorkers(t, path, register, "r0", "r1", "r2")
	cmd := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := Command(context.Background(), append(args, "-config", path), register, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	store, _ := slotstore.New(rdb, "pz")
	paused := func() []slot.Record {
		recs, err := store.Records(context.Background(), "tick", 50)
		if err != nil {
			t.Fatal(err)
		}
		var out []slot.Record
		for _, r := range recs {
			if r.State == slot.StatePaused {
				out = append(out, r)
			}
		}
		return out
	}

	if out := cmd("pause", "tick", "-note", "migration"); !strings.HasPrefix(out, "paused tick: ") {
		t.Fatalf("pause printed %q", out)
	}
	// Paused again without a note, the first pause's reason stays.
	if out := cmd("pause", "tick"); !strings.Contains(out, `tick was paused already, by `) || !strings.Contains(out, `: "migration"; left as it is`) {
		t.Fatalf("a second pause printed %q", out)
	}
	waitFor(t, 30*time.Second, func() bool { return len(paused()) >= 3 })
	if out := cmd("status"); !strings.Contains(out, "  PAUSED since ") || !strings.Contains(out, ": migration (worker resume tick)") {
		t.Fatalf("status while paused:\n%s", out)
	}
	if out := cmd("resume", "tick"); out != "resumed tick: its next slot runs\n" {
		t.Fatalf("resume printed %q", out)
	}
	resumed := time.Now()
	waitFor(t, 30*time.Second, func() bool {
		recs, _ := store.Records(context.Background(), "tick", 1)
		return len(recs) == 1 && recs[0].Slot.After(resumed) && recs[0].State == slot.StateDone
	})

	ran := map[string]int{}
	for _, s := range rdb.LRange(context.Background(), "pz:ran", 0, -1).Val() {
		ran[s]++
	}
	for _, r := range paused() {
		if !strings.HasPrefix(r.Error, "paused by ") || !strings.HasSuffix(r.Error, ": migration") || ran[strconv.FormatInt(r.Slot.Unix(), 10)] != 0 {
			t.Errorf("paused slot %s: %+v, ran %d times", r.Slot.Format(time.TimeOnly), r, ran[strconv.FormatInt(r.Slot.Unix(), 10)])
		}
	}
	for s, n := range ran {
		if n != 1 {
			t.Errorf("slot %s ran %d times", s, n)
		}
	}
}

// waitFor polls ok until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWorkers runs a worker (Command run) per id with the config at path,
// each one started before the next (SLOTCRON_REPLICA_ID is read at start).
// The returned stop, also run at cleanup, ends them and fails the test if
// one exited non-zero.
func startWorkers(t *testing.T, path string, register Registrar, ids ...string) (stop func()) {
	t.Helper()
	return startWorkersEnv(t, path, register, nil, ids...)
}

// startWorkersEnv is startWorkers; workerEnv(i), when not nil, sets the
// environment of worker i (t.Setenv) before it loads its config.
func startWorkersEnv(t *testing.T, path string, register Registrar, workerEnv func(i int), ids ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exits := make(chan int, len(ids))
	logs := make([]*syncBuffer, len(ids))
	for i, id := range ids {
		logs[i] = &syncBuffer{}
		t.Setenv(ReplicaIDEnv, id)
		if workerEnv != nil {
			workerEnv(i)
		}
		go func() { exits <- Command(ctx, []string{"run", "-config", path}, register, io.Discard, logs[i]) }()
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(logs[i].String(), `"msg":"scheduler started"`) })
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for range ids {
				if code := <-exits; code != 0 {
					t.Errorf("a worker exited %d", code)
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

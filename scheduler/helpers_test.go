package scheduler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
)

// offsetClock is the machine's clock moved by d: a replica whose clock is off.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }
func (c offsetClock) NewTimer(d time.Duration) scheduler.Timer {
	return scheduler.SystemClock().NewTimer(d)
}

// testLog sends a replica's logs to the test, until the test ends.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func newTestLog(t *testing.T) *testLog {
	l := &testLog{t: t}
	t.Cleanup(func() { l.mu.Lock(); l.done = true; l.mu.Unlock() })
	return l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) logger(level slog.Level) *slog.Logger {
	var w io.Writer = l
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// env is one Redis and the replicas a test runs against it.
type env struct {
	t      *testing.T
	srv    *redistest.Server
	rdb    *redis.Client // the test's own view
	prefix string
	log    *testLog
}

func newEnv(t *testing.T) *env {
	srv := redistest.Start(t)
	return &env{t: t, srv: srv, rdb: srv.Client(), prefix: srv.Key("sc"), log: newTestLog(t)}
}

// replica is one running Scheduler.
type replica struct {
	id     string
	s      *scheduler.Scheduler
	rdb    *redis.Client
	stop   func()
	done   chan struct{}
	runErr error
}

// start runs a replica with its own connection (to addr, or to the server
// when addr is "") until stop or the end of the test.
func (e *env) start(id, addr string, reg *jobs.Registry, table []scheduler.Job, opts ...scheduler.Option) *replica {
	e.t.Helper()
	o := e.srv.Options()
	if addr != "" {
		o.Addr = addr
	}
	rdb := redis.NewClient(o)
	slots, err := locking.NewSlots(rdb, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	opts = append([]scheduler.Option{
		scheduler.WithReplicaID(id),
		scheduler.WithJobs(table...),
		scheduler.WithLogger(e.log.logger(slog.LevelWarn).With("replica", id)),
		scheduler.WithKeyPrefix(e.prefix),
	}, opts...)
	s, err := scheduler.New(slots, reg, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, s: s, rdb: rdb, done: make(chan struct{})}
	go func() {
		r.runErr = s.Run(ctx)
		close(r.done)
	}()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			<-r.done
			rdb.Close()
		})
	}
	e.t.Cleanup(r.stop)
	return r
}

// start is one recorded start of a job: what the job wrote.
type start struct {
	job     string
	slot    int64
	replica string
	attempt int
	fence   int64
}

// recorder is a job that records its start in the list key, then works for
// hold (or until its context ends).
func recorder(rdb *redis.Client, key string, hold time.Duration) jobs.Func {
	return func(ctx context.Context, run jobs.Run) error {
		entry := fmt.Sprintf("%s|%d|%s|%d|%d", run.Job, run.Slot.Unix(), run.Replica, run.Attempt, run.Fence)
		if err := rdb.RPush(context.WithoutCancel(ctx), key, entry).Err(); err != nil {
			return err
		}
		select {
		case <-time.After(hold):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// starts reads what recorder wrote.
func (e *env) starts(key string) []start {
	e.t.Helper()
	raw, err := e.rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []start
	for _, s := range raw {
		f := strings.Split(s, "|")
		slot, _ := strconv.ParseInt(f[1], 10, 64)
		attempt, _ := strconv.Atoi(f[3])
		fence, _ := strconv.ParseInt(f[4], 10, 64)
		out = append(out, start{f[0], slot, f[2], attempt, fence})
	}
	return out
}

// record reads one slot record.
func (e *env) record(job string, slot int64) (locking.SlotRecord, bool) {
	e.t.Helper()
	slots, _ := locking.NewSlots(e.rdb, e.prefix)
	rec, ok, err := slots.Record(context.Background(), job, time.Unix(slot, 0))
	if err != nil {
		e.t.Fatal(err)
	}
	return rec, ok
}

func registry(t *testing.T, fns map[string]jobs.Func) *jobs.Registry {
	reg := jobs.NewRegistry()
	for name, fn := range fns {
		if err := reg.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// sleepUntil sleeps until t on the machine's clock.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// nextSecond is the first whole second at least d from now.
func nextSecond(d time.Duration) time.Time {
	return time.Now().Add(d).Truncate(time.Second).Add(time.Second)
}

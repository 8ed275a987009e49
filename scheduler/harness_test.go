package scheduler_test

// The harness: replicas of the scheduler against one in-memory Redis
// (miniredis, which runs the very Lua scripts that ship), all inside a
// testing/synctest bubble.
//
// In the bubble, time is a fake clock that the test advances: it moves only
// when every goroutine of the test is blocked (on a timer, a channel, a
// sleep), and then straight to the next timer. The scheduler's timers, its
// lease-validity timers, the jobs' sleeps and Redis's own clock (TIME, and the
// TTLs, through miniredis's ClockTTL) all read that one clock. So a test
// decides the order of events, and the outcome cannot depend on how busy the
// machine is: a 20-second scenario runs in milliseconds, the same way every
// time. Connections are in-memory pipes (miniredis.Dial), which the bubble
// sees as blocking operations like any other.
//
// What the harness cannot show, the tests against a real Redis do: slotstore's
// tests, BenchmarkDispatch, and the worker's end-to-end test.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// harness is one in-memory Redis and the replicas a test runs against it.
type harness struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	rdb    *redis.Client // the test's own view
	store  *slotstore.Store
	prefix string
	log    *testLog
	pause  *redisPause // Redis stopped, as every replica sees it
}

// bubble runs f in a synctest bubble, with a fresh harness. The bubble's
// clock starts at 2000-01-01 00:00:00 UTC.
func bubble(t *testing.T, f func(t *testing.T, h *harness)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		mr := miniredis.NewMiniRedis()
		mr.ClockTTL(true) // TTLs run on the bubble's clock
		t.Cleanup(mr.Close)
		h := &harness{t: t, mr: mr, prefix: "sc", log: newTestLog(t)}
		h.rdb = h.client(nil)
		h.pause = &redisPause{replay: h.rdb}
		store, err := slotstore.New(h.rdb, h.prefix)
		if err != nil {
			t.Fatal(err)
		}
		h.store = store
		f(t, h)
	})
}

// client returns a client of the harness's Redis whose commands pass through
// gate (nil: none), closed at the end of the test.
func (h *harness) client(gate *netGate) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		// An IP address, and no maintenance notifications: go-redis resolves a
		// host name when it builds a client, and a lookup can't run in a bubble.
		Addr:                     "127.0.0.1:6379",
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer:                   func(context.Context, string, string) (net.Conn, error) { return h.dial() },
		MaxRetries:               -1, // a frozen network is the test's to decide, not go-redis's
		DisableIdentity:          true,
	})
	if gate != nil {
		rdb.AddHook(h.pause)
		rdb.AddHook(gate)
	}
	h.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// dial connects to the harness's Redis over an in-memory pipe whose writes
// are buffered, as a socket's are: on a bare net.Pipe a pipeline bigger than
// the server's read buffer deadlocks (the server blocks writing a reply that
// the client, still writing, does not read yet).
func (h *harness) dial() (net.Conn, error) {
	c, err := h.mr.Dial()
	if err != nil {
		return nil, err
	}
	bc := &bufferedConn{Conn: c, out: make(chan []byte, 4096), done: make(chan struct{})}
	go bc.flush()
	return bc, nil
}

// bufferedConn queues writes and sends them from its own goroutine.
type bufferedConn struct {
	net.Conn
	out  chan []byte
	done chan struct{} // closed when flush has returned

	mu     sync.Mutex
	closed bool
}

func (c *bufferedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.out <- append([]byte(nil), p...)
	return len(p), nil
}

func (c *bufferedConn) flush() {
	defer close(c.done)
	for p := range c.out {
		if _, err := c.Conn.Write(p); err != nil {
			for range c.out { // drop the rest; the reader sees the error
			}
			return
		}
	}
}

func (c *bufferedConn) Close() error {
	err := c.Conn.Close() // first: a flush blocked on the pipe returns
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.out)
	}
	c.mu.Unlock()
	<-c.done
	return err
}

// pauseRedis stops Redis as SIGSTOP does, for every replica: commands sent
// meanwhile wait. resumeRedis runs them in the order they were sent, those
// whose callers gave up included (their replies are lost), then lets the
// rest through.
func (h *harness) pauseRedis()  { h.pause.stop() }
func (h *harness) resumeRedis() { h.pause.resume() }

// redisPause is a go-redis hook that models a stopped Redis.
type redisPause struct {
	replay *redis.Client // runs the commands whose callers gave up

	mu      sync.Mutex
	paused  bool
	tickets []*ticket // in the order sent
}

// ticket is one command (or pipeline) sent while Redis is stopped.
type ticket struct {
	args     [][]any
	proceed  chan struct{} // closed when it may run, on resume
	ran      chan struct{} // closed when it has run
	gaveUp   bool          // its caller's context ended first: replayed on resume
	released bool
}

func (p *redisPause) stop() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

func (p *redisPause) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tk := range p.tickets {
		if tk.gaveUp {
			pipe := p.replay.Pipeline()
			for _, a := range tk.args {
				pipe.Do(context.Background(), a...)
			}
			pipe.Exec(context.Background()) // Redis runs it; nobody reads the reply
			continue
		}
		tk.released = true
		close(tk.proceed)
		p.mu.Unlock()
		<-tk.ran
		p.mu.Lock()
	}
	p.tickets, p.paused = nil, false
}

// wait holds cmds while Redis is stopped; false when the caller gave up.
func (p *redisPause) wait(ctx context.Context, cmds []redis.Cmder) (tk *ticket, ok bool) {
	p.mu.Lock()
	if !p.paused {
		p.mu.Unlock()
		return nil, true
	}
	tk = &ticket{proceed: make(chan struct{}), ran: make(chan struct{})}
	for _, c := range cmds {
		tk.args = append(tk.args, append([]any(nil), c.Args()...))
	}
	p.tickets = append(p.tickets, tk)
	p.mu.Unlock()
	select {
	case <-tk.proceed:
		return tk, true
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if tk.released {
		return tk, true
	}
	tk.gaveUp = true
	return nil, false
}

func (p *redisPause) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *redisPause) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		tk, ok := p.wait(ctx, []redis.Cmder{cmd})
		if !ok {
			err := fmt.Errorf("redis paused: %w", ctx.Err())
			cmd.SetErr(err)
			return err
		}
		if tk != nil {
			defer close(tk.ran)
			ctx = context.WithoutCancel(ctx) // sent already: it runs
		}
		return next(ctx, cmd)
	}
}
func (p *redisPause) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		tk, ok := p.wait(ctx, cmds)
		if !ok {
			err := fmt.Errorf("redis paused: %w", ctx.Err())
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		if tk != nil {
			defer close(tk.ran)
			ctx = context.WithoutCancel(ctx)
		}
		return next(ctx, cmds)
	}
}

// netGate is a replica's network: while it is frozen, every command waits
// until it thaws or the command's context ends, as on a partition.
type netGate struct {
	mu     sync.Mutex
	frozen chan struct{} // nil when open; closed on thaw
}

func (g *netGate) freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen == nil {
		g.frozen = make(chan struct{})
	}
}

func (g *netGate) thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen != nil {
		close(g.frozen)
		g.frozen = nil
	}
}

func (g *netGate) wait(ctx context.Context) error {
	g.mu.Lock()
	frozen := g.frozen
	g.mu.Unlock()
	if frozen == nil {
		return nil
	}
	select {
	case <-frozen:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("network frozen: %w", ctx.Err())
	}
}

func (g *netGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *netGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.wait(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (g *netGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.wait(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// stepClock is a replica's clock: the bubble's, moved by an offset that the
// test may step, like NTP stepping a machine's clock.
type stepClock struct{ offset atomic.Int64 }

func newStepClock(offset time.Duration) *stepClock {
	c := &stepClock{}
	c.offset.Store(int64(offset))
	return c
}

func (c *stepClock) Now() time.Time                           { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *stepClock) step(d time.Duration)                     { c.offset.Add(int64(d)) }
func (c *stepClock) NewTimer(d time.Duration) scheduler.Timer { return bubbleTimer{time.NewTimer(d)} }

type bubbleTimer struct{ t *time.Timer }

func (t bubbleTimer) C() <-chan time.Time { return t.t.C }
func (t bubbleTimer) Stop() bool          { return t.t.Stop() }

// replica is one running Scheduler.
type replica struct {
	id     string
	s      *scheduler.Scheduler
	net    *netGate
	clock  *stepClock
	stop   func()
	done   chan struct{}
	runErr error
}

// replicaOpts are what a test may set on a replica beyond scheduler options.
type replicaOpts struct {
	offset  time.Duration                            // its clock's offset from the bubble's
	clock   *stepClock                               // its clock, when the test holds it from before the start (offset is then unused)
	prefix  string                                   // its key prefix, when not the harness's
	claimer func(*slotstore.Store) scheduler.Claimer // wraps its store
}

// start runs a replica until its stop or the end of the test.
func (h *harness) start(id string, reg *jobs.Registry, table []scheduler.Job, opts ...scheduler.Option) *replica {
	return h.startWith(id, replicaOpts{}, reg, table, opts...)
}

func (h *harness) startWith(id string, ro replicaOpts, reg *jobs.Registry, table []scheduler.Job, opts ...scheduler.Option) *replica {
	h.t.Helper()
	r := &replica{id: id, net: &netGate{}, clock: newStepClock(ro.offset), done: make(chan struct{})}
	if ro.clock != nil {
		r.clock = ro.clock
	}
	prefix := h.prefix
	if ro.prefix != "" {
		prefix = ro.prefix
	}
	store, err := slotstore.New(h.client(r.net), prefix)
	if err != nil {
		h.t.Fatal(err)
	}
	var claimer scheduler.Claimer = store
	if ro.claimer != nil {
		claimer = ro.claimer(store)
	}
	opts = append([]scheduler.Option{
		scheduler.WithReplicaID(id),
		scheduler.WithJobs(table...),
		scheduler.WithClock(r.clock),
		scheduler.WithLogger(h.log.logger(slog.LevelWarn).With("replica", id)),
		scheduler.WithKeyPrefix(prefix),
	}, opts...)
	s, err := scheduler.New(claimer, reg, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	r.s = s
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		r.runErr = s.Run(ctx)
		close(r.done)
	}()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			r.net.thaw() // a stopping replica must be able to record its runs
			cancel()
			<-r.done
		})
	}
	h.t.Cleanup(r.stop)
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
// hold (or until its context ends, returning the cause).
func recorder(rdb *redis.Client, key string, hold time.Duration) jobs.Func {
	return func(ctx context.Context, run jobs.Run) error {
		entry := fmt.Sprintf("%s|%d|%s|%d|%d", run.Job, run.Slot.Unix(), run.Replica, run.Attempt, run.Fence)
		if err := rdb.RPush(context.WithoutCancel(ctx), key, entry).Err(); err != nil {
			return err
		}
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// starts reads what recorder wrote.
func (h *harness) starts(key string) []start {
	h.t.Helper()
	raw, err := h.rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	var out []start
	for _, s := range raw {
		f := strings.Split(s, "|")
		at, _ := strconv.ParseInt(f[1], 10, 64)
		attempt, _ := strconv.Atoi(f[3])
		fence, _ := strconv.ParseInt(f[4], 10, 64)
		out = append(out, start{f[0], at, f[2], attempt, fence})
	}
	return out
}

// eachSlot reads, for each slot of job from from to to (unix s, to
// excluded), its record and how many runs recorder wrote to key for it. It
// fails the test for a slot with no record or started more than once, and
// hands every other slot to check.
func (h *harness) eachSlot(job, key string, from, to int64, check func(at int64, r slot.Record, starts int)) {
	h.t.Helper()
	count := map[int64]int{}
	for _, s := range h.starts(key) {
		if s.job == job {
			count[s.slot]++
		}
	}
	for at := from; at < to; at++ {
		r, ok := h.record(job, at)
		switch {
		case !ok:
			h.t.Errorf("slot %d of %s ended with no record", at, job)
		case count[at] > 1:
			h.t.Errorf("slot %d of %s started %d times", at, job, count[at])
		default:
			check(at, r, count[at])
		}
	}
}

// record reads one slot record.
func (h *harness) record(job string, at int64) (slot.Record, bool) {
	h.t.Helper()
	rec, ok, err := h.store.Record(context.Background(), job, time.Unix(at, 0))
	if err != nil {
		h.t.Fatal(err)
	}
	return rec, ok
}

// ranThenStopped runs replica id of table for run, stops it, and returns
// the latest slot of table's first job that has a record (unix seconds):
// what a start after an outage plans from.
func (h *harness) ranThenStopped(id string, reg *jobs.Registry, table []scheduler.Job, run time.Duration, opts ...scheduler.Option) int64 {
	h.t.Helper()
	r := h.start(id, reg, table, opts...)
	time.Sleep(run)
	r.stop()
	name := table[0].Name
	states, err := h.store.JobStates(context.Background(), []string{name})
	if err != nil || states[name].Last.IsZero() {
		h.t.Fatalf("no slot ran before the stop: %v %v", states, err)
	}
	return states[name].Last.Unix()
}

func registry(t testing.TB, fns map[string]jobs.Func) *jobs.Registry {
	reg := jobs.NewRegistry()
	for name, fn := range fns {
		if err := reg.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// sleepUntil sleeps until t on the machine's clock (in a bubble, the bubble's).
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// nextSecond is the first whole second at least d from now.
func nextSecond(d time.Duration) time.Time {
	return time.Now().Add(d).Truncate(time.Second).Add(time.Second)
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

// eventLog collects the events replicas report (scheduler.WithEventHook).
type eventLog struct {
	mu     sync.Mutex
	events []scheduler.Event
}

func (l *eventLog) hook(e scheduler.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) option() scheduler.Option { return scheduler.WithEventHook(l.hook) }

// of returns the events of kind, and fails t when two share an ID: a fact
// reported twice.
func (l *eventLog) of(t *testing.T, kind scheduler.EventKind) []scheduler.Event {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []scheduler.Event
	seen := map[string]bool{}
	for _, e := range l.events {
		if e.Kind != kind {
			continue
		}
		if seen[e.ID] {
			t.Errorf("event %s reported twice", e.ID)
		}
		seen[e.ID] = true
		out = append(out, e)
	}
	return out
}

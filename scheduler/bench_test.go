package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// tripCounter is a go-redis hook that counts the round trips made under a
// context marked by countingClaimer: each pipeline, or lone command, is one.
type tripCounter struct{}

type tripsKey struct{}

func (tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n, ok := ctx.Value(tripsKey{}).(*atomic.Int64); ok {
			n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n, ok := ctx.Value(tripsKey{}).(*atomic.Int64); ok {
			n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// countingClaimer counts the round trips of the batches that carry a tick's
// live claims, and of the batches that carry only takeover checks.
type countingClaimer struct {
	*slotstore.Store
	tickBatches, tickTrips   atomic.Int64
	checkBatches, checkTrips atomic.Int64
	finishTrips              atomic.Int64
}

// Finish counts the round trips of the finishes.
func (c *countingClaimer) Finish(ctx context.Context, reqs []slot.FinishRequest) []error {
	var n atomic.Int64
	errs := c.Store.Finish(context.WithValue(ctx, tripsKey{}, &n), reqs)
	c.finishTrips.Add(n.Load())
	return errs
}

func (c *countingClaimer) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	var n atomic.Int64
	res, err := c.Store.Claim(context.WithValue(ctx, tripsKey{}, &n), claims)
	live := slices.ContainsFunc(claims, func(c slot.Claim) bool { return c.Kind == slot.ClaimLive })
	if live {
		c.tickBatches.Add(1)
		c.tickTrips.Add(n.Load())
	} else {
		c.checkBatches.Add(1)
		c.checkTrips.Add(n.Load())
	}
	return res, err
}

// statsOut, when set (BENCH_REDIS_STATS=file), receives Redis's INFO
// commandstats of the counted ticks, and file.slowlog the commands of
// slowlogFloorUS or more that they ran (µs, then the first 3 arguments).
var statsOut = os.Getenv("BENCH_REDIS_STATS")

// redisNice, when set (BENCH_REDIS_NICE=-10), is the nice level the bench
// gives its Redis (setpriority; a level below 0 needs root or CAP_SYS_NICE).
// The replicas share two cores with Redis here, and when they keep both busy
// the kernel preempts Redis mid-command: SLOWLOG then times a 1-key SET at
// 5 ms. With Redis ahead of them, as on a host of its own, the longest
// command is what Redis spent on it. The figures say which one they are.
var redisNice = os.Getenv("BENCH_REDIS_NICE")

// redisFIFO, when set (BENCH_REDIS_FIFO=1), puts the bench's Redis in the
// real-time class SCHED_FIFO at that priority (chrt; root or CAP_SYS_NICE):
// no replica then preempts it, whatever its nice level, so SLOWLOG times
// what Redis spent on a command, as on a host of its own. Its CPU figures
// are Redis's work either way.
var redisFIFO = os.Getenv("BENCH_REDIS_FIFO")

// heapOut, when set (BENCH_HEAP=file), receives a heap profile of this
// process (every replica) after the counted ticks, before the replicas stop.
var heapOut = os.Getenv("BENCH_HEAP")

// perfOut, when set (BENCH_REDIS_PERF=file), receives a perf profile of the
// bench's Redis over the counted ticks (perf record with DWARF call graphs:
// bench/redis-profile.sh reads it). perf's sampling costs Redis CPU of its
// own, so the run's Redis figures are not the bench's.
var perfOut = os.Getenv("BENCH_REDIS_PERF")

// dispatchTicks is how many ticks BenchmarkDispatch counts: 10, or
// BENCH_TICKS (a profile wants more samples).
func dispatchTicks(b *testing.B) int {
	v := os.Getenv("BENCH_TICKS")
	if v == "" {
		return 10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("BENCH_TICKS=%q: want a number of ticks, 1 or more", v)
	}
	return n
}

// startPerf starts perf record on srv's process (a redis-server on this
// machine that the bench started: INFO's process_id), writing to perfOut,
// and returns what stops it and waits for its file to be written. A bench
// that fails before then kills it.
func startPerf(b *testing.B, srv *redistest.Server) func() {
	cmd := exec.Command("perf", "record", "-q", "-F", "999", "--call-graph", "dwarf,16384",
		"-p", strconv.Itoa(redisPID(b, srv)), "-o", perfOut)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatalf("BENCH_REDIS_PERF: perf record: %v (Debian: apt-get install linux-perf)", err)
	}
	stopped := false
	b.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return func() {
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		// perf writes its file on SIGINT, then dies of it.
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); err != nil && !(ok && ws.Signaled() && ws.Signal() == syscall.SIGINT) {
			b.Fatalf("BENCH_REDIS_PERF: perf record: %v: %s", err, out.String())
		}
	}
}

// slowlogFloorUS is the SLOWLOG threshold during the counted ticks: the
// longest command is reported exactly when it is at least that long, and as
// that long when none is.
const slowlogFloorUS = 100

// BenchmarkDispatch runs replicas of a table of 100 jobs, all due every
// second, for 10 ticks (BENCH_TICKS), and reports the dispatch delay (slot time to job
// start on the winner), the round trips per tick per replica, and the CPU
// time per tick of this process (all replicas) and of Redis. The issue's
// figure is replicas=5; replicas=1 is the same table without contention.
//
//	go test -run '^$' -bench Dispatch -benchtime 1x ./scheduler
func BenchmarkDispatch(b *testing.B) {
	for _, replicas := range []int{1, 5} {
		for _, routing := range []scheduler.Routing{scheduler.RoutingRace, scheduler.RoutingSpread} {
			b.Run(fmt.Sprintf("replicas=%d/routing=%s", replicas, routing), func(b *testing.B) { benchDispatch(b, replicas, routing) })
		}
	}
}

func benchDispatch(b *testing.B, replicas int, routing scheduler.Routing) {
	benchTick(b, 100, dispatchTicks(b), replicas, routing)
}

// BenchmarkScale is bench/scale.sh's table: 10 to 10,000 jobs due in the
// same tick, 1, 5 and 20 replicas in this process, spread routing, 5 ticks.
// Besides BenchmarkDispatch's figures it reports the longest command Redis
// ran (SLOWLOG) and this process's RSS.
//
//	go test -run '^$' -bench Scale -benchtime 1x ./scheduler
func BenchmarkScale(b *testing.B) {
	for _, njobs := range []int{10, 100, 1000, 10000} {
		for _, replicas := range []int{1, 5, 20} {
			b.Run(fmt.Sprintf("jobs=%d/replicas=%d", njobs, replicas), func(b *testing.B) {
				benchTick(b, njobs, 5, replicas, scheduler.RoutingSpread)
			})
		}
	}
}

// benchTick runs replicas of a table of njobs jobs, all due every second,
// for ticks ticks, and reports what it cost.
func benchTick(b *testing.B, njobs, ticks, replicas int, routing scheduler.Routing) {
	for range b.N {
		srv := redistest.Start(b)
		// An idle Redis beside it, measured over the same window: what a
		// Redis costs with no client at all (its own cron, which reads /proc
		// ten times a second), so that the figure slotcron adds is shown apart.
		twin := redistest.StartOwned(b)
		if redisNice != "" {
			renice(b, srv, redisNice)
		}
		if redisFIFO != "" {
			realtime(b, srv, redisFIFO)
		}
		prefix := srv.Key("bench")
		var (
			mu     sync.Mutex
			delays []time.Duration
			ran    = map[string]int{}   // runs per replica
			did    = map[jobSlot]bool{} // the counted slots that started
		)
		// The counted ticks start once every replica has heartbeated (at the
		// default period, 5s) with all the others live, so that spread
		// routing sees them all: set below, read by the jobs.
		var firstUnix atomic.Int64
		fn := func(ctx context.Context, run jobs.Run) error {
			d := time.Since(run.Slot)
			if f := firstUnix.Load(); f != 0 && run.Slot.Unix() >= f && run.Slot.Unix() < f+int64(ticks) {
				mu.Lock()
				delays = append(delays, d)
				ran[run.Replica]++
				did[jobSlot{run.Job, run.Slot.Unix()}] = true
				mu.Unlock()
			}
			return nil
		}
		reg := jobs.NewRegistry()
		var table []scheduler.Job
		for i := range njobs {
			name := fmt.Sprintf("job%03d", i)
			reg.Register(name, fn)
			table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s", LeaseTTL: 2 * time.Second, Routing: routing})
		}
		var counters []*countingClaimer
		var scheds []*scheduler.Scheduler
		var stops []func()
		for r := range replicas {
			rdb := redis.NewClient(srv.Options())
			rdb.AddHook(tripCounter{})
			slots, _ := slotstore.New(rdb, prefix)
			cc := &countingClaimer{Store: slots}
			counters = append(counters, cc)
			s, err := scheduler.New(cc, reg, scheduler.WithJobs(table...), scheduler.WithReplicaID(fmt.Sprint("r", r)))
			if err != nil {
				b.Fatal(err)
			}
			scheds = append(scheds, s)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			stops = append(stops, func() { cancel(); <-done; rdb.Close() })
		}
		// Wait until every replica sees all the others (the first to start
		// sees the rest at its second heartbeat; large tables take longer to
		// start, as each replica reads every job's state), then count from
		// the next whole second but one.
		waitFrom := time.Now()
		for deadline := waitFrom.Add(2*time.Minute + time.Duration(njobs*replicas)*50*time.Microsecond); ; time.Sleep(100 * time.Millisecond) {
			seen := replicas
			for _, s := range scheds {
				reg, _ := s.Replicas()
				seen = min(seen, len(reg.Replicas))
			}
			if seen == replicas {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("after %v, a replica sees %d live replicas, want %d", time.Since(waitFrom).Round(time.Second), seen, replicas)
			}
		}
		first := time.Now().Truncate(time.Second).Add(2 * time.Second)
		firstUnix.Store(first.Unix())
		// Count over [first-100ms, first+ticks-100ms): exactly the ticks first ... first+ticks-1.
		sleepUntil(first.Add(-100 * time.Millisecond))
		adminOpts := srv.Options()
		adminOpts.ReadTimeout = 30 * time.Second
		admin := redis.NewClient(adminOpts)
		defer admin.Close()
		// Every command of 100µs or more is logged (so the longest is known
		// when it is that long; a logged command costs Redis a little, and
		// logging every one would add to every figure). A claim, a finish or
		// a read of one slot takes a few µs.
		admin.ConfigSet(context.Background(), "slowlog-log-slower-than", strconv.Itoa(slowlogFloorUS))
		admin.ConfigSet(context.Background(), "slowlog-max-len", "100000")
		admin.Do(context.Background(), "SLOWLOG", "RESET")
		admin.ConfigResetStat(context.Background())
		stopPerf := func() {}
		if perfOut != "" {
			stopPerf = startPerf(b, srv)
		}
		goCPU0, redisCPU0, mallocs0 := cpuNow(b, srv)
		_, idleCPU0, _ := cpuNow(b, twin)
		var base []int64
		for _, c := range counters {
			base = append(base, c.tickBatches.Load(), c.tickTrips.Load(), c.checkBatches.Load(), c.checkTrips.Load(), c.finishTrips.Load())
		}
		sleepUntil(first.Add(time.Duration(ticks)*time.Second - 100*time.Millisecond))
		goCPU1, redisCPU1, mallocs1 := cpuNow(b, srv)
		_, idleCPU1, _ := cpuNow(b, twin)
		stopPerf()
		slowest := slowlogFloorUS * time.Microsecond // none logged: under the floor
		over5ms := 0
		if entries, err := admin.SlowLogGet(context.Background(), -1).Result(); err == nil {
			var log strings.Builder
			for _, e := range entries {
				slowest = max(slowest, e.Duration)
				if e.Duration >= 5*time.Millisecond {
					over5ms++
				}
				fmt.Fprintf(&log, "%d %q\n", e.Duration.Microseconds(), e.Args[:min(3, len(e.Args))])
			}
			if statsOut != "" {
				os.WriteFile(statsOut+".slowlog", []byte(log.String()), 0o644)
			}
		}
		admin.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000")
		var tickBatches, tickTrips, checkBatches, checkTrips, finishTrips int64
		for i, c := range counters {
			tickBatches += c.tickBatches.Load() - base[5*i]
			tickTrips += c.tickTrips.Load() - base[5*i+1]
			checkBatches += c.checkBatches.Load() - base[5*i+2]
			checkTrips += c.checkTrips.Load() - base[5*i+3]
			finishTrips += c.finishTrips.Load() - base[5*i+4]
		}
		stats, err := admin.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		if statsOut != "" {
			os.WriteFile(statsOut, []byte(stats), 0o644)
		}
		// Runs of the counted ticks that start late still count, for 30s.
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			mu.Lock()
			n := len(delays)
			mu.Unlock()
			if n >= njobs*ticks {
				break
			}
		}
		if heapOut != "" { // what the replicas hold once the counted ticks have run
			runtime.GC()
			if f, err := os.Create(heapOut); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		for _, stop := range stops {
			stop()
		}
		mu.Lock()
		if len(delays) < njobs*ticks { // what became of the slots that did not start
			b.Logf("slots that did not start within 30s, by their record's state: %v", notStarted(b, admin, prefix, table, first, ticks, did))
		}
		slices.Sort(delays)
		if len(delays) == 0 { // nothing to measure: the cell says so
			b.Logf("no run of the %d ticks of %d jobs started within 30s", ticks, njobs)
			b.ReportMetric(0, "started-%")
			mu.Unlock()
			continue
		}
		// Every run should start; the share that did within 30s is reported.
		b.ReportMetric(100*float64(len(delays))/float64(njobs*ticks), "started-%")
		q := func(p float64) float64 { return float64(delays[int(p*float64(len(delays)-1))]) / 1e6 }
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		b.ReportMetric(float64(delays[len(delays)-1])/1e6, "max-ms")
		b.ReportMetric(float64(tickTrips)/float64(replicas*ticks), "claim-trips/tick/replica")
		b.ReportMetric(float64(tickBatches)/float64(replicas*ticks), "claim-batches/tick/replica")
		b.ReportMetric(float64(goCPU1-goCPU0)/1e6/float64(ticks), "go-cpu-ms/tick")
		b.ReportMetric(float64(redisCPU1-redisCPU0)/1e6/float64(ticks), "redis-cpu-ms/tick")
		b.ReportMetric(float64(mallocs1-mallocs0)/float64(ticks), "go-allocs/tick")
		b.ReportMetric(float64(checkTrips)/float64(replicas*ticks), "check-trips/tick/replica")
		b.ReportMetric(float64(finishTrips)/float64(replicas*ticks), "finish-trips/tick/replica")
		b.ReportMetric(float64(redisCPU1-redisCPU0)/1e3/float64(njobs*ticks), "redis-cpu-us/slot")
		idle := idleCPU1 - idleCPU0
		b.ReportMetric(float64(idle)/1e3/float64(njobs*ticks), "redis-idle-us/slot")
		b.ReportMetric(float64(redisCPU1-redisCPU0-idle)/1e3/float64(njobs*ticks), "redis-net-us/slot")
		b.ReportMetric(float64(commandCalls(stats))/float64(njobs*ticks), "redis-calls/slot")
		scripts, _ := redistest.CommandTime(stats, "evalsha") // none ran: 0
		b.ReportMetric(float64(scripts.Nanoseconds())/1e3/float64(njobs*ticks), "redis-script-us/slot")
		lo, hi := njobs*ticks, 0
		for r := range replicas {
			n := ran[fmt.Sprint("r", r)]
			lo, hi = min(lo, n), max(hi, n)
		}
		b.ReportMetric(100*float64(lo)/float64(njobs*ticks), "min-share-%")
		b.ReportMetric(100*float64(hi)/float64(njobs*ticks), "max-share-%")
		b.ReportMetric(float64(slowest.Microseconds())/1e3, "slowest-cmd-ms")
		b.ReportMetric(float64(over5ms), "cmds-over-5ms")
		b.ReportMetric(float64(goCPU1-goCPU0)/1e3/float64(njobs*ticks), "go-cpu-us/slot")
		b.ReportMetric(float64(rssNow(b))/(1<<20), "rss-mb")
		mu.Unlock()
		_ = checkBatches
	}
}

// cpuNow returns the CPU time used so far by this process (every replica) and
// by the Redis server (INFO cpu: used_cpu_user + used_cpu_sys), and the
// number of heap allocations this process has made.
func cpuNow(b *testing.B, srv *redistest.Server) (goCPU, redisCPU time.Duration, mallocs uint64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	goCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs = ms.Mallocs
	opts := srv.Options()
	opts.ReadTimeout = 30 * time.Second // Redis may be busy with a large tick
	info := redis.NewClient(opts)
	defer info.Close()
	s, err := info.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			redisCPU += time.Duration(f * float64(time.Second))
		}
	}
	return goCPU, redisCPU, mallocs
}

// renice sets the scheduling priority of srv's process (INFO server's
// process_id) to level.
func renice(b *testing.B, srv *redistest.Server, level string) {
	n, err := strconv.Atoi(level)
	if err != nil {
		b.Fatalf("BENCH_REDIS_NICE=%q: %v", level, err)
	}
	pid := redisPID(b, srv)
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, n); err != nil {
		b.Fatalf("BENCH_REDIS_NICE=%d: setpriority of Redis (pid %d): %v (a level below 0 needs root or CAP_SYS_NICE; "+
			"a Redis in a container or on another host is not this machine's to renice)", n, pid, err)
	}
}

// rssNow is this process's resident set size, from /proc.
func rssNow(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

type jobSlot struct {
	job string
	at  int64
}

// notStarted counts the slots of the table's jobs in the ticks from first
// that are not in did, by the state of their record ("none": no record).
func notStarted(b *testing.B, rdb *redis.Client, prefix string, table []scheduler.Job, first time.Time, ticks int, did map[jobSlot]bool) map[string]int {
	store, err := slotstore.New(rdb, prefix)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int{}
	for _, j := range table {
		for t := range ticks {
			at := first.Add(time.Duration(t) * time.Second)
			if did[jobSlot{j.Name, at.Unix()}] {
				continue
			}
			rec, ok, err := store.Record(context.Background(), j.Name, at)
			switch {
			case err != nil:
				out["error"]++
			case !ok:
				out["none"]++
			default:
				out[string(rec.State)]++
			}
		}
	}
	return out
}

// realtime puts srv's Redis (every thread of it) in SCHED_FIFO at priority.
func realtime(b *testing.B, srv *redistest.Server, priority string) {
	if n, err := strconv.Atoi(priority); err != nil || n < 1 || n > 99 {
		b.Fatalf("BENCH_REDIS_FIFO=%q: want a real-time priority, 1 to 99", priority)
	}
	pid := redisPID(b, srv)
	if out, err := exec.Command("chrt", "-a", "-f", "-p", priority, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		b.Fatalf("BENCH_REDIS_FIFO=%s: chrt of Redis (pid %d): %v: %s (it needs root or CAP_SYS_NICE, and util-linux's chrt; "+
			"a Redis in a container or on another host is not this machine's to schedule)", priority, pid, err, out)
	}
}

// redisPID is the process ID of srv's Redis, from INFO server.
func redisPID(b *testing.B, srv *redistest.Server) int {
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if pid, err := strconv.Atoi(v); err == nil && pid > 0 {
				return pid
			}
		}
	}
	b.Fatalf("INFO server names no process_id: %q", info)
	return 0
}

// commandCalls is how many commands INFO commandstats counts, those that
// scripts call among them, but for the bench's own (CONFIG, SLOWLOG, INFO,
// HELLO, CLIENT): what the replicas asked of Redis. Unlike its CPU time, a
// count does not grow when the replicas preempt Redis.
func commandCalls(stats string) int64 {
	var n int64
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok || strings.HasPrefix(name, "config") || strings.HasPrefix(name, "slowlog") || strings.HasPrefix(name, "client") ||
			name == "info" || name == "hello" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(calls, 10, 64)
		n += c
	}
	return n
}

// BenchmarkDispatchFloor is the floor under BenchmarkDispatch's Redis CPU
// per slot: the same shape of work (100 slots due every second, 10 ticks,
// 1 or 5 clients, each with a connection pool of its own, against a Redis
// on this machine, an idle twin measured beside it) done by the least a
// protocol could do. Each client takes an even fifth of each tick's slots
// (what spread routing aims at), and for them sends one pipeline of plain
// SET NX PX of a 200-byte record (the claim) and, once it is answered, one
// pipeline of SET PX of the final record (the finish): two commands per
// slot, two round trips per client per tick, no script, no lease, no fence,
// no hedger's read, no heartbeat. slotcron's claim and finish can cost
// Redis no less than this; what a protocol may trim is the difference.
//
//	go test -run '^$' -bench DispatchFloor -benchtime 1x ./scheduler
func BenchmarkDispatchFloor(b *testing.B) {
	for _, clients := range []int{1, 5} {
		b.Run(fmt.Sprintf("replicas=%d", clients), func(b *testing.B) { benchFloor(b, 100, 10, clients) })
	}
}

func benchFloor(b *testing.B, nslots, ticks, clients int) {
	for range b.N {
		srv := redistest.Start(b)
		twin := redistest.StartOwned(b)
		prefix := srv.Key("floor")
		rdbs := make([]*redis.Client, clients)
		for c := range rdbs {
			rdbs[c] = redis.NewClient(srv.Options())
			defer rdbs[c].Close()
			if err := rdbs[c].Ping(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
		}
		running, done := strings.Repeat("r", 200), strings.Repeat("d", 200)
		first := time.Now().Truncate(time.Second).Add(2 * time.Second)
		sleepUntil(first.Add(-100 * time.Millisecond))
		admin := redis.NewClient(srv.Options())
		defer admin.Close()
		admin.ConfigResetStat(context.Background())
		_, redisCPU0, _ := cpuNow(b, srv)
		_, idleCPU0, _ := cpuNow(b, twin)
		var failed atomic.Int64
		for t := range ticks {
			at := first.Add(time.Duration(t) * time.Second)
			sleepUntil(at)
			var wg sync.WaitGroup
			for c, rdb := range rdbs {
				wg.Go(func() {
					ctx := context.Background()
					var keys []string
					for i := c; i < nslots; i += clients {
						keys = append(keys, fmt.Sprintf("%s:{job%03d}:slot:%d", prefix, i, at.Unix()))
					}
					claims := rdb.Pipeline()
					won := make([]*redis.BoolCmd, len(keys))
					for i, k := range keys {
						won[i] = claims.SetNX(ctx, k, running, 24*time.Hour)
					}
					if _, err := claims.Exec(ctx); err != nil {
						failed.Add(1)
						return
					}
					finishes := rdb.Pipeline()
					for i, k := range keys {
						if won[i].Val() {
							finishes.Set(ctx, k, done, 24*time.Hour)
						}
					}
					if _, err := finishes.Exec(ctx); err != nil {
						failed.Add(1)
					}
				})
			}
			wg.Wait()
		}
		sleepUntil(first.Add(time.Duration(ticks)*time.Second - 100*time.Millisecond))
		_, redisCPU1, _ := cpuNow(b, srv)
		_, idleCPU1, _ := cpuNow(b, twin)
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d pipelines failed", n)
		}
		stats, err := admin.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		slots := float64(nslots * ticks)
		if calls := float64(commandCalls(stats)); calls != 2*slots {
			b.Fatalf("Redis counted %.0f commands for %.0f slots; want 2 a slot", calls, slots)
		}
		idle := idleCPU1 - idleCPU0
		b.ReportMetric(float64(redisCPU1-redisCPU0)/1e3/slots, "redis-cpu-us/slot")
		b.ReportMetric(float64(idle)/1e3/slots, "redis-idle-us/slot")
		b.ReportMetric(float64(redisCPU1-redisCPU0-idle)/1e3/slots, "redis-net-us/slot")
		b.ReportMetric(float64(commandCalls(stats))/slots, "redis-calls/slot")
	}
}

// missCounter counts the miss claims that reach Redis's claim script, and
// stamps when the last of them was sent (lastMiss), and the last of them
// or of the reads of records (lastAny).
type missCounter struct {
	*slotstore.Store
	n, lastMiss, lastAny *atomic.Int64
}

func (m missCounter) Peek(ctx context.Context, claims []slot.Claim) ([]slot.Record, error) {
	m.lastAny.Store(time.Now().UnixNano())
	return m.Store.Peek(ctx, claims)
}

func (m missCounter) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	var n int64
	for _, c := range claims {
		if c.Kind == slot.ClaimMiss {
			n++
		}
	}
	if n > 0 {
		m.n.Add(n)
		now := time.Now().UnixNano()
		m.lastMiss.Store(now)
		m.lastAny.Store(now)
	}
	return m.Store.Claim(ctx, claims)
}

// BenchmarkOutageStart: 5 replicas of a table of 100 jobs due every 10s
// (catchup: none) start together after every replica was down for
// 100 minutes, so each plans the same slots to record missed (about
// 60,000). It reports what recording them cost Redis (CPU until 2s after
// the last miss claim or read of records, all of it and net of an idle
// twin's), the miss claims that reached Redis per slot, and how long after
// the start the last was sent; and checks, before the replicas stop (a
// stop records what is left), that every slot of the outage has its
// missed record. bench/ab-outage.sh runs it for two revisions side by
// side.
//
//	go test -run '^$' -bench OutageStart -benchtime 1x ./scheduler
func BenchmarkOutageStart(b *testing.B) {
	const njobs, replicas, every, down = 100, 5, 10, 6000
	for range b.N {
		srv := redistest.Start(b)
		twin := redistest.StartOwned(b)
		prefix := srv.Key("outage")
		admin := redis.NewClient(srv.Options())
		defer admin.Close()
		seed, err := slotstore.New(admin, prefix)
		if err != nil {
			b.Fatal(err)
		}
		reg := jobs.NewRegistry()
		var table []scheduler.Job
		for i := range njobs {
			name := fmt.Sprintf("job%03d", i)
			reg.Register(name, func(context.Context, jobs.Run) error { return nil })
			table = append(table, scheduler.Job{Name: name, Schedule: fmt.Sprintf("@every %ds", every), Catchup: scheduler.CatchupNone,
				MisfireGrace: 2 * time.Second, LeaseTTL: 2 * time.Second})
		}
		// The last slot before the outage, recorded for each job: the
		// replicas plan from it.
		last := time.Now().Add(-down * time.Second).Truncate(every * time.Second)
		var seedClaims []slot.Claim
		for _, j := range table {
			seedClaims = append(seedClaims, slot.Claim{Kind: slot.ClaimMiss, Job: j.Name, Slot: last, Replica: "seed", Retention: 24 * time.Hour})
		}
		res, err := seed.Claim(context.Background(), seedClaims)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil || r.Outcome != slot.OutcomeMissed {
				b.Fatalf("seeding the jobs' last slots: %s %v", r.Outcome, r.Err)
			}
		}
		var sent, lastMiss, lastAny atomic.Int64
		started := time.Now()
		planned := started.Add(-scheduler.DefaultMaxSkew) // the slots up to here are recorded missed
		_, redisCPU0, _ := cpuNow(b, srv)
		_, idleCPU0, _ := cpuNow(b, twin)
		var stops []func()
		for r := range replicas {
			rdb := redis.NewClient(srv.Options())
			store, _ := slotstore.New(rdb, prefix)
			s, err := scheduler.New(missCounter{store, &sent, &lastMiss, &lastAny}, reg, scheduler.WithJobs(table...), scheduler.WithReplicaID(fmt.Sprint("r", r)))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			stops = append(stops, func() { cancel(); <-done; rdb.Close() })
		}
		// Done when no miss claim, nor read of records, has gone for 2s
		// (the postponed slots go half a second after a replica's own
		// share or more).
		for deadline := started.Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if l := lastAny.Load(); l != 0 && time.Since(time.Unix(0, l)) > 2*time.Second {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("still sending miss claims after %v", time.Since(started))
			}
		}
		took := time.Unix(0, lastMiss.Load()).Sub(started)
		_, redisCPU1, _ := cpuNow(b, srv)
		_, idleCPU1, _ := cpuNow(b, twin)
		// Checked before the replicas stop: a stop records what is left.
		var check []slot.Claim
		for _, j := range table {
			for at := last.Add(every * time.Second); !at.After(planned); at = at.Add(every * time.Second) {
				check = append(check, slot.Claim{Job: j.Name, Slot: at})
			}
		}
		for i := 0; i < len(check); i += 5000 {
			part := check[i:min(i+5000, len(check))]
			recs, err := seed.Peek(context.Background(), part)
			if err != nil {
				b.Fatal(err)
			}
			for k, rec := range recs {
				if rec.State != slot.StateMissed {
					b.Fatalf("%s slot %s of the outage: %q, want missed", part[k].Job, part[k].Slot.UTC().Format(time.TimeOnly), rec.State)
				}
			}
		}
		for _, stop := range stops {
			stop()
		}
		slots := float64(len(check))
		b.ReportMetric(slots, "slots")
		b.ReportMetric(float64(sent.Load())/slots, "miss-claims/slot")
		b.ReportMetric(float64(redisCPU1-redisCPU0)/1e6, "redis-cpu-ms")
		b.ReportMetric(float64(redisCPU1-redisCPU0-(idleCPU1-idleCPU0))/1e6, "redis-net-ms")
		b.ReportMetric(float64(redisCPU1-redisCPU0-(idleCPU1-idleCPU0))/1e3/slots, "redis-net-us/slot")
		b.ReportMetric(took.Seconds(), "last-claim-s")
	}
}

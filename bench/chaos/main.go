// Command chaos runs slotcron's lottery on 5 worker processes against a real
// redis-server with appendonly on, injects the faults production sees, and
// reports what each cost. bench/chaos.sh runs it.
//
// Each worker reaches Redis through its own TCP proxy (toxiproxy, in this
// process), so one worker can be cut off. The faults, at fixed fractions of
// the run:
//
//	10%  SIGKILL a worker; it is started again 15s later
//	30%  SIGSTOP a worker for longer than its lease TTL, then SIGCONT
//	50%  kill -9 Redis; start it again from the same data directory 5s later
//	70%  partition a worker from Redis (its proxy drops every byte) for 10s
//
// Afterwards it reads every slot's draw and record from Redis, and every
// "job started" line from the workers' logs (what ran, whatever Redis kept),
// and prints one line:
//
//	N slots, N draws, 0 drawn twice, M missing, fences rise: true (K draws after a later slot's)
//
// then a table of each fault with the slots in its window and what became of
// them. A slot may be missing (no draw) only if its record says why, or, with
// no record, only while no worker could reach Redis. It exits 1 when a slot
// was drawn or run twice, a fence fell (in the order the draws were written),
// or a missing slot has no explanation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

const prefix = "chaos"

func main() {
	duration := flag.Duration("duration", 5*time.Minute, "how long the workers run")
	workers := flag.Int("workers", 5, "how many worker processes")
	keep := flag.Bool("keep", false, "keep the work directory (logs, Redis data)")
	flag.Parse()
	if *workers < 4 {
		fail("need at least 4 workers: one to kill, one to stop, one to cut off, and one that stays")
	}
	os.Exit(run(*duration, *workers, *keep))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos: "+format+"\n", args...)
	os.Exit(2)
}

// fault is one injected fault and when it was in effect.
type fault struct {
	name       string
	start, end time.Time
}

func run(duration time.Duration, n int, keep bool) int {
	dir, err := os.MkdirTemp("", "slotcron-chaos-")
	if err != nil {
		fail("%v", err)
	}
	if keep {
		fmt.Println("work directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/worker").CombinedOutput(); err != nil {
		fail("go build ./cmd/worker: %v\n%s", err, out)
	}
	redisDir := filepath.Join(dir, "redis")
	os.MkdirAll(redisDir, 0o755)
	port := freePort()
	rs := &redisServer{dir: redisDir, port: port}
	rs.start()
	defer rs.kill()
	addr := "127.0.0.1:" + strconv.Itoa(port)

	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	var procs []*worker
	for i := 1; i <= n; i++ {
		p := toxiproxy.NewProxy(server, fmt.Sprintf("w%d", i), "127.0.0.1:0", addr)
		if err := p.Start(); err != nil {
			fail("proxy: %v", err)
		}
		defer p.Stop()
		w := &worker{id: fmt.Sprintf("w%d", i), bin: bin, dir: dir, proxy: p}
		w.writeConfig()
		w.start()
		procs = append(procs, w)
	}
	defer func() {
		for _, w := range procs {
			w.signal(syscall.SIGCONT)
			w.signal(syscall.SIGKILL)
		}
	}()

	began := time.Now()
	at := func(frac float64) time.Time { return began.Add(time.Duration(frac * float64(duration))) }
	sleepUntil := func(t time.Time) { time.Sleep(time.Until(t)) }
	var faults []fault
	fmt.Printf("chaos: %d workers, lottery @every 1s, lease TTL 3s, redis-server %s with appendonly, for %v\n", n, addr, duration)

	sleepUntil(at(0.10))
	f := fault{name: "SIGKILL w1, restarted 15s later", start: time.Now()}
	procs[0].signal(syscall.SIGKILL)
	procs[0].wait()
	time.Sleep(15 * time.Second)
	procs[0].start()
	f.end = time.Now()
	faults = append(faults, f)

	sleepUntil(at(0.30))
	f = fault{name: "SIGSTOP w2 for 8s (TTL 3s)", start: time.Now()}
	procs[1].signal(syscall.SIGSTOP)
	time.Sleep(8 * time.Second)
	procs[1].signal(syscall.SIGCONT)
	f.end = time.Now()
	faults = append(faults, f)

	sleepUntil(at(0.50))
	f = fault{name: "kill -9 Redis, restarted after 5s", start: time.Now()}
	rs.kill()
	time.Sleep(5 * time.Second)
	rs.start()
	f.end = time.Now()
	faults = append(faults, f)

	sleepUntil(at(0.70))
	f = fault{name: "partition w3 from Redis for 10s", start: time.Now()}
	procs[2].partition(true)
	time.Sleep(10 * time.Second)
	procs[2].partition(false)
	f.end = time.Now()
	faults = append(faults, f)

	sleepUntil(at(1))
	end := time.Now()
	for _, w := range procs {
		w.signal(syscall.SIGTERM)
	}
	for _, w := range procs {
		w.wait()
	}
	return report(addr, procs, faults, began, end)
}

// report reads what happened and prints it; 1 when a guarantee broke.
func report(addr string, procs []*worker, faults []fault, began, end time.Time) int {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	draws, err := lottery.New(rdb, prefix).Draws(ctx)
	if err != nil {
		fail("draws: %v", err)
	}
	store, _ := slotstore.New(rdb, prefix)
	drawn := map[int64]int{}
	for _, d := range draws {
		drawn[d.Slot]++
	}
	ran := map[int64]int{}
	for _, w := range procs {
		for _, s := range w.starts() {
			ran[s]++
		}
	}
	// Slots from the first whole second after the workers started (give them
	// 5s) to the last second before the stop.
	first := began.Add(5 * time.Second).Truncate(time.Second).Add(time.Second)
	last := end.Add(-2 * time.Second).Truncate(time.Second)
	bad := 0
	twice, missing := 0, 0
	type row struct {
		slots, drawn, missing int
		states                map[string]int
	}
	rows := make([]row, len(faults)+1) // the last row: no fault
	for i := range rows {
		rows[i].states = map[string]int{}
	}
	for s := first; !s.After(last); s = s.Add(time.Second) {
		u := s.Unix()
		ri := len(faults)
		for i, f := range faults {
			if !s.Before(f.start.Add(-time.Second)) && !s.After(f.end.Add(5*time.Second)) {
				ri = i
				break
			}
		}
		rows[ri].slots++
		if drawn[u] > 1 || ran[u] > 1 {
			twice++
			bad++
			fmt.Printf("  slot %s drawn %d times, run %d times\n", s.Format(time.TimeOnly), drawn[u], ran[u])
		}
		if drawn[u] >= 1 {
			rows[ri].drawn++
			continue
		}
		missing++
		rows[ri].missing++
		rec, ok, err := store.Record(ctx, lottery.Name, s)
		switch {
		case err != nil:
			fail("record: %v", err)
		case ok && rec.State != slot.StateRunning && rec.State != slot.StateDone:
			rows[ri].states[string(rec.State)]++
		case !ok && ri < len(faults) && strings.Contains(faults[ri].name, "Redis"):
			rows[ri].states["no record: Redis was down"]++
		default:
			bad++
			rows[ri].states["UNEXPLAINED"]++
			fmt.Printf("  slot %s has no draw, and its record (%v) does not say why: %+v\n", s.Format(time.TimeOnly), ok, rec)
		}
	}
	// Fences grow with every claim, so they rise in the order the draws were
	// written (the draws list), not in slot order: a slot delayed by an
	// outage is claimed, and drawn, after a later slot that ran on time.
	rise, late := true, 0
	for i := 1; i < len(draws); i++ {
		if draws[i].Fence <= draws[i-1].Fence {
			rise = false
			bad++
			fmt.Printf("  fence fell: draw %d (slot %d) has fence %d, the draw before it (slot %d) %d\n",
				i, draws[i].Slot, draws[i].Fence, draws[i-1].Slot, draws[i-1].Fence)
		}
		if draws[i].Slot < draws[i-1].Slot {
			late++
		}
	}
	slots := int(last.Sub(first)/time.Second) + 1
	fmt.Printf("%d slots, %d draws, %d drawn twice, %d missing, fences rise: %v (%d draws after a later slot's)\n",
		slots, slots-missing, twice, missing, rise, late)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FAULT\tWINDOW\tSLOTS\tDRAWN\tMISSING\tWHY (SLOT RECORDS)")
	for i, r := range rows {
		name, window := "none (the rest of the run)", "-"
		if i < len(faults) {
			name = faults[i].name
			window = fmt.Sprintf("%s-%s", faults[i].start.Format(time.TimeOnly), faults[i].end.Format(time.TimeOnly))
		}
		var why []string
		for k, v := range r.states {
			why = append(why, fmt.Sprintf("%d %s", v, k))
		}
		sort.Strings(why)
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\n", name, window, r.slots, r.drawn, r.missing, strings.Join(why, ", "))
	}
	w.Flush()
	if bad > 0 {
		return 1
	}
	return 0
}

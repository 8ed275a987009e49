// Command peers runs gocron v2 with a redsync locker (wired as
// go-co-op/gocron-redis-lock wires it) and slotcron on the same work, and
// prints one table: 3 replicas, a 1ms job every second, 10 counted ticks,
// with the replicas' clocks equal, then 0, 20 and 400ms ahead of the real
// clock, then 0, 20 and 400ms behind it. For each it reports the runs per
// slot, the Redis commands per slot and the dispatch delay. A second table
// is the lock cycle (Obtain and Release of one key) of bsm/redislock,
// redsync and slotcron's locking, in interleaved rounds.
//
// It starts its own redis-server on a free port, and needs one on PATH.
// It is a module of its own, so that gocron, redsync and redislock never
// enter slotcron's module graph; its go.mod replaces slotcron with this
// checkout.
//
//	cd bench/peers && go run .            # about 2 minutes
//	go run . -ticks 3 -rounds 1           # a quick look
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/slotcron/slotcron/scheduler"
)

func main() {
	ticks := flag.Int("ticks", 10, "counted slots per row")
	rounds := flag.Int("rounds", 7, "lock cycle: rounds of each library, interleaved")
	cycles := flag.Int("cycles", 2000, "lock cycle: cycles per round")
	verbose := flag.Bool("v", false, "print slotcron's warnings (e.g. its clock check) to stderr")
	flag.Parse()
	if *ticks < 1 || *rounds < 1 || *cycles < 1 {
		fmt.Fprintln(os.Stderr, "peers: -ticks, -rounds and -cycles must be at least 1")
		os.Exit(2)
	}
	if *verbose {
		slotcronLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *ticks, *rounds, *cycles); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// clocks are the replicas' clock offsets of each row.
var clocks = []struct {
	label   string
	offsets []time.Duration
}{
	{"equal", []time.Duration{0, 0, 0}},
	{"0, 20, 400 ms ahead", []time.Duration{0, 20 * time.Millisecond, 400 * time.Millisecond}},
	{"0, 20, 400 ms behind", []time.Duration{0, -20 * time.Millisecond, -400 * time.Millisecond}},
}

func run(ctx context.Context, w io.Writer, ticks, rounds, cycles int) error {
	srv, err := startRedis(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()

	schedulers := []scenario{
		// gocron's replicas fire on the second by their own clocks: a
		// second's lead has them all scheduled.
		{name: "gocron v2 + redsync", lead: 1500 * time.Millisecond, start: startGocron},
		// slotcron's spread routing waits for each replica to see the
		// others' heartbeats (every 5s by default) before it hedges.
		{name: "slotcron", lead: scheduler.DefaultHeartbeatEvery + 1500*time.Millisecond, start: startSlotcron},
	}
	type row struct {
		clocks string
		name   string
		res    result
	}
	var rows []row
	for _, c := range clocks {
		for _, sc := range schedulers {
			sc.offsets, sc.ticks = c.offsets, ticks
			fmt.Fprintf(os.Stderr, "peers: %s, clocks %s: %d ticks\n", sc.name, c.label, ticks)
			res, err := sc.run(ctx, srv)
			if err != nil {
				return fmt.Errorf("%s, clocks %s: %w", sc.name, c.label, err)
			}
			rows = append(rows, row{c.label, sc.name, res})
		}
	}
	fmt.Fprintf(os.Stderr, "peers: lock cycle, %d rounds of %d\n", rounds, cycles)
	lcs, err := lockCycles(ctx, srv, rounds, cycles)
	if err != nil {
		return fmt.Errorf("lock cycle: %w", err)
	}

	fmt.Fprintf(w, "machine: %s\n", machine(ctx, srv))
	fmt.Fprintf(w, "3 replicas (r0, r1, r2) in one process, each with its own go-redis client, on one local redis-server;\n")
	fmt.Fprintf(w, "the job sleeps 1 ms, every second; %d counted slots per row; replica clocks offset from the real clock as listed\n\n", ticks)
	fmt.Fprintln(w, "| replica clocks | scheduler | runs per slot: mean (min–max) | slots run more than once | runs by r0 / r1 / r2 | Redis commands per slot (sent by the replicas) | dispatch p50 | dispatch p99 | earliest start |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		total, twice := 0, 0
		for _, n := range r.res.runs {
			total += n
			if n > 1 {
				twice++
			}
		}
		slots := float64(len(r.res.runs))
		fmt.Fprintf(w, "| %s | %s | %.1f (%d–%d) | %d of %d | %d / %d / %d | %.1f (%.1f) | %s | %s | %s |\n",
			r.clocks, r.name,
			float64(total)/slots, slices.Min(r.res.runs), slices.Max(r.res.runs), twice, len(r.res.runs),
			r.res.byRep["r0"], r.res.byRep["r1"], r.res.byRep["r2"],
			float64(r.res.commands)/slots, float64(r.res.sent)/slots,
			ms(percentile(r.res.delays, 50)), ms(percentile(r.res.delays, 99)), ms(percentile(r.res.delays, 0)))
	}
	fmt.Fprintf(w, "\nlock cycle: Obtain + Release of one free key, 10 s TTL, one client each; %d rounds of %d cycles, interleaved\n\n", rounds, cycles)
	fmt.Fprintln(w, "| library | ns/op: median of rounds (min–max) | Redis commands per cycle (sent by the client) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, lc := range lcs {
		fmt.Fprintf(w, "| %s | %.0f (%.0f–%.0f) | %.1f (%.1f) |\n", lc.name,
			median(lc.nsPerCycle), slices.Min(lc.nsPerCycle), slices.Max(lc.nsPerCycle),
			float64(lc.commands)/float64(lc.cycles), float64(lc.sent)/float64(lc.cycles))
	}
	return nil
}

// ms prints a duration in milliseconds; a run before its slot's time is
// negative.
func ms(d time.Duration) string {
	if d.Abs() >= 100*time.Millisecond {
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1f ms", float64(d)/1e6)
}

// machine describes the machine and the versions measured.
func machine(ctx context.Context, srv *redisServer) string {
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	versions := []string{runtime.Version(), "Redis " + srv.version(ctx)}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			switch dep.Path {
			case "github.com/go-co-op/gocron/v2", "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/go-redis/v9":
				versions = append(versions, strings.TrimPrefix(dep.Path, "github.com/")+" "+dep.Version)
			}
		}
	}
	return fmt.Sprintf("%d cores, %s, %s/%s; %s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, strings.Join(versions, ", "))
}

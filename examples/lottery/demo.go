package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
	"github.com/slotcron/slotcron/worker"
)

// demo runs the replicas, prints a line per slot and the verdict.
func demo(o options) int {
	sched, err := scheduler.ParseSchedule(o.schedule)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lottery: schedule:", err)
		return 2
	}
	if o.replicas < 1 || o.slots < 1 {
		fmt.Fprintln(os.Stderr, "lottery: -replicas and -slots must be at least 1")
		return 2
	}
	if o.jaeger != "" { // traces sent to nothing would be lost without a word
		c, err := net.DialTimeout("tcp", o.jaeger, 2*time.Second)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lottery: -jaeger %s: nothing answers there (%v); start Jaeger (see the README) or leave -jaeger out\n", o.jaeger, err)
			return 2
		}
		c.Close()
	}
	where := "Redis at " + o.redis
	if o.redis != "" {
		// A real Redis may hold other deployments' keys, and an earlier
		// demo's: a fresh prefix shares none of them (their fences would
		// refuse this run's draws), and the demo removes its keys at the end.
		o.prefix = "lottery-demo-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		where += ", under the fresh key prefix " + o.prefix
	}
	if o.redis == "" {
		addr, stop, err := worker.StartEmbeddedRedis()
		if err != nil {
			fmt.Fprintln(os.Stderr, "lottery:", err)
			return 1
		}
		defer stop()
		o.redis, where = addr, "an embedded Redis (miniredis) at "+addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: o.redis, DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	// Ctrl-C (or SIGTERM) stops the wait: the replicas stop as at the end
	// (they ignore the terminal's SIGINT: the demo stops them), and the
	// demo's keys are removed.
	interrupted, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	go func() { // a second Ctrl-C ends the demo at once, its keys left
		<-interrupted.Done()
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		<-again
		fmt.Fprintln(os.Stderr, "lottery: interrupted again: exiting now")
		os.Exit(130)
	}()
	if err := rdb.Ping(ctx).Err(); err != nil {
		fmt.Fprintf(os.Stderr, "lottery: Redis at %s does not answer: %v\n", o.redis, err)
		return 1
	}
	if o.prefix != slot.DefaultKeyPrefix {
		defer removeKeys(rdb, o.prefix) // after the replicas have stopped (defers run last first)
	}

	if err := lottery.New(rdb, o.prefix).Seed(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 1
	}
	reports := make(chan report, 100)
	started := time.Now()
	kids, err := startReplicas(o, reports)
	defer func() { // on the returns before the replicas are stopped below
		for _, err := range stopReplicas(kids) {
			fmt.Fprintln(os.Stderr, "lottery:", err)
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 1
	}
	if err := awaitReady(interrupted, reports, o.replicas, 30*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return exitCode(interrupted)
	}

	// The replicas run the schedule from the moment they start; a draw in
	// progress (a busy machine can make it outlast the interval) would make
	// the next slot skipped (overlap: skip). The demo's slots start once no
	// run holds the job, and the participants were seeded above, so no
	// draw does more than the others.
	first, err := firstFreeSlot(interrupted, rdb, o.prefix, sched, started, 30*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return exitCode(interrupted)
	}
	slots := []time.Time{first}
	for len(slots) < o.slots {
		slots = append(slots, sched.Next(slots[len(slots)-1]))
	}
	l := lottery.New(rdb, o.prefix)
	layout := time.TimeOnly
	if wait := time.Until(slots[0]); wait > time.Hour || slots[len(slots)-1].YearDay() != slots[0].YearDay() {
		layout = "2006-01-02 15:04:05 MST"
	}
	fmt.Printf("lottery: %s, each a process, on %s; schedule %q; %s from %s\n",
		count(o.replicas, "replica"), where, o.schedule, count(o.slots, "slot"), slots[0].Format(layout))
	if wait := time.Until(slots[0]); wait > 10*time.Second {
		fmt.Printf("the first slot is %s, in %v: waiting (Ctrl-C stops)\n", slots[0].Format("2006-01-02 15:04:05 MST"), wait.Round(time.Second))
	}
	// The replicas run the schedule from the moment they start, so they
	// may have drawn a slot or two before the first one counted here: a
	// fence counts every claim, those included, which is why the first
	// counted slot's fence is not the first fence.
	if early, err := l.Draws(ctx); err == nil && len(early) > 0 {
		fmt.Printf("(%d draw(s) before the counted slots, made while the replicas started: not counted)\n", len(early))
	}
	col := columns(o.replicas)
	if o.replicas > 1+scheduler.Hedgers {
		fmt.Printf("(spread routing: a slot's preferred replica and its %d hedgers take part in it; the other replicas only look for its record, and report nothing unless they must claim it)\n",
			scheduler.Hedgers)
	}
	records, _ := slotstore.New(rdb, o.prefix)
	running := func(at time.Time) bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		rec, ok, err := records.Record(rctx, lottery.Name, at)
		return err == nil && ok && rec.State == slot.StateRunning
	}
	seen, done := collect(interrupted, reports, slots, min(o.replicas, 1+scheduler.Hedgers), o.replicas, running, l, col, layout)
	failed := stopReplicas(kids) // they flush their spans as they stop
	for _, err := range failed {
		fmt.Fprintln(os.Stderr, "lottery:", err)
	}
	if done < len(slots) {
		fmt.Fprintf(os.Stderr, "lottery: interrupted after %d of %d slots: the replicas have stopped\n", done, len(slots))
		return 130
	}

	code := verdict(ctx, rdb, l, o.prefix, slots, seen, layout)
	if len(failed) > 0 {
		fmt.Printf("%s of %d did not end well (above)\n", count(len(failed), "replica"), o.replicas)
		code = max(code, 1)
	}
	if o.jaeger != "" && !showTraces(interrupted, jaegerUI(o.jaeger), o.prefix, slots) {
		code = max(code, 1)
	}
	return code
}

// kid is a replica's process. Its reader passes the replica's reports on
// until the replica is told to stop, and drops them after (nothing reads
// them then): a full channel must not stop the reader, and with it the
// replica, which would block on its stdout.
type kid struct {
	id       string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stopping chan struct{} // closed by stopReplicas
	done     chan struct{} // closed when the reader has read stdout to its end
	stopped  bool
}

// newKid starts cmd as the replica id, its stdout's reports sent on
// reports.
func newKid(id string, cmd *exec.Cmd, reports chan<- report) (*kid, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	k := &kid{id: id, cmd: cmd, stdin: stdin, stopping: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r report
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				select {
				case reports <- r:
				case <-k.stopping:
				}
			}
		}
	}()
	return k, nil
}

func startReplicas(o options, reports chan<- report) ([]*kid, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var kids []*kid
	for i := 1; i <= o.replicas; i++ {
		id := fmt.Sprintf("replica-%d", i)
		args := []string{"-role", "replica", "-replica-id", id, "-redis", o.redis, "-schedule", o.schedule, "-prefix", o.prefix}
		if o.jaeger != "" {
			args = append(args, "-jaeger", o.jaeger)
		}
		if o.verbose {
			args = append(args, "-v")
		}
		cmd := exec.Command(exe, args...)
		cmd.Stderr = os.Stderr
		k, err := newKid(id, cmd, reports)
		if err != nil {
			return kids, err
		}
		kids = append(kids, k)
	}
	return kids, nil
}

// stopReplicas closes their stdin (they stop gracefully) and waits; the
// replicas that have not stopped within stopWithin are killed. It returns
// what went wrong with each replica: an exit status other than 0 (a crash,
// or a race report when race-built: 66), or a kill. A second call does
// nothing.
func stopReplicas(kids []*kid) []error {
	for _, k := range kids {
		if k.stdin != nil {
			k.stdin.Close()
			k.stdin = nil
			close(k.stopping)
		}
	}
	var errs []error
	deadline := time.After(stopWithin) // one for all: they were all told at once
	for _, k := range kids {
		if k.stopped {
			continue
		}
		k.stopped = true
		select {
		case <-k.done:
		case <-deadline:
			deadline = closed // the next replica's wait has run out too
			if err := k.cmd.Process.Kill(); !errors.Is(err, os.ErrProcessDone) {
				<-k.done // the kill closed its stdout
				k.cmd.Wait()
				errs = append(errs, fmt.Errorf("%s did not stop within %v of its stdin's close: killed", k.id, stopWithin))
				continue
			}
			<-k.done // it exited just now
		}
		if err := k.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.id, err))
		}
	}
	return errs
}

// closed is a closed channel: a deadline that has passed.
var closed = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// stopWithin is how long stopReplicas waits for a replica to stop.
var stopWithin = 15 * time.Second

func awaitReady(ctx context.Context, reports <-chan report, n int, within time.Duration) error {
	deadline := time.After(within)
	ready := map[string]bool{}
	for len(ready) < n {
		select {
		case r := <-reports:
			if r.Event == "ready" {
				ready[r.Replica] = true
			}
		case <-deadline:
			return fmt.Errorf("only %d of %d replicas started within %v", len(ready), n, within)
		case <-ctx.Done():
			return fmt.Errorf("interrupted while %d of %d replicas had started", len(ready), n)
		}
	}
	return nil
}

// exitCode is the demo's exit code for a wait that failed: 130 when a
// signal ended it, as a shell reports Ctrl-C, else 1.
func exitCode(interrupted context.Context) int {
	if interrupted.Err() != nil {
		return 130
	}
	return 1
}

// slotView is what the replicas reported for one slot.
type slotView struct {
	winner string
	fence  int64
	lost   []string
	other  []string // outcomes besides won and lost
}

// straggle is how long after a slot's time its line waits for more than
// its winner or n reports: a replica that has not yet seen every peer in
// the registry may judge its part in a slot otherwise, and a slot may have
// no winner.
const straggle = 3 * time.Second

// slotComplete reports whether a slot's line can be printed, since after
// its time, given whether its winner has reported (when its run has ended),
// how many replicas have, of n that take part and replicas in all. Past
// straggle, n reports without the winner's are enough unless running (read
// only then) says the slot's record is running: its run has not ended (a
// busy machine can starve it for seconds), and stopping the replicas then
// would cut its draw short.
func slotComplete(since time.Duration, won bool, reports, n, replicas int, running func() bool) bool {
	switch {
	case won && reports >= n, reports >= replicas:
		return true
	case since <= straggle:
		return false
	case won:
		return true
	}
	return reports >= n && !running()
}

// collect prints a line for each slot once its winner and n replicas in
// all have reported on it (under spread routing, its preferred replica and
// hedgers), or a few seconds after the slot's time its winner or n
// replicas have (and its record is not running), or every replica has,
// and returns what they reported and how many slots it printed: fewer than
// all when ctx ended first (Ctrl-C). (The winner reports when its run has
// ended: its line shows the draw.) running reads whether a slot's record
// is running.
func collect(ctx context.Context, reports <-chan report, slots []time.Time, n, replicas int, running func(time.Time) bool, l *lottery.Lottery, col columnWidths, layout string) (map[int64]*slotView, int) {
	want := map[int64]bool{}
	for _, s := range slots {
		want[s.Unix()] = true
	}
	seen := map[int64]*slotView{}
	reported := map[int64]map[string]bool{} // the replicas that reported a final outcome, by slot
	next := 0
	complete := func(at time.Time) bool {
		won := seen[at.Unix()] != nil && seen[at.Unix()].winner != ""
		return slotComplete(time.Since(at), won, len(reported[at.Unix()]), n, replicas, func() bool { return running(at) })
	}
	deadline := time.After(time.Until(slots[len(slots)-1]) + 30*time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for next < len(slots) {
		select {
		case <-ctx.Done():
			return seen, next
		case <-tick.C:
		case r := <-reports:
			t, err := time.Parse(time.RFC3339, r.Slot)
			if r.Event != "slot" || err != nil || !want[t.Unix()] {
				continue
			}
			if pending[r.Outcome] || reported[t.Unix()][r.Replica] {
				// Not a replica's last word on the slot: its claim goes
				// again (a replica whose clock runs ahead of Redis's is
				// answered busy while the previous run holds the job).
				continue
			}
			v := seen[t.Unix()]
			if v == nil {
				v = &slotView{}
				seen[t.Unix()] = v
				reported[t.Unix()] = map[string]bool{}
			}
			switch r.Outcome {
			case "won":
				v.winner, v.fence = r.Replica, r.Fence
			case "lost":
				v.lost = append(v.lost, r.Replica)
			default:
				v.other = append(v.other, r.Replica+": "+r.Outcome)
			}
			reported[t.Unix()][r.Replica] = true
		case <-deadline:
			for ; next < len(slots); next++ {
				printSlot(slots[next], seen[slots[next].Unix()], l, col, layout)
			}
		}
		for next < len(slots) && complete(slots[next]) {
			printSlot(slots[next], seen[slots[next].Unix()], l, col, layout)
			next++
		}
	}
	return seen, next
}

// pending are the outcomes of a claim that is sent again: a replica's
// report of one is not its last on the slot.
var pending = map[string]bool{"busy": true, "early": true, "error": true}

// columnWidths keeps the slot lines aligned for any number of replicas:
// up to 5 replicas, the losers are named; past that, counted.
type columnWidths struct {
	replica, lost int
	name          bool // name the losers
}

func columns(replicas int) columnWidths {
	w := len(fmt.Sprintf("replica-%d", replicas))
	c := columnWidths{replica: w, name: replicas <= 5}
	if c.name {
		c.lost = max((replicas-1)*(w+2)-2, 4)
	} else {
		c.lost = len(fmt.Sprintf("%d replicas", replicas-1))
	}
	return c
}

func printSlot(slot time.Time, v *slotView, l *lottery.Lottery, col columnWidths, layout string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	winners := "no draw"
	if w, ok, err := l.Winners(ctx, slot.Unix()); err == nil && ok {
		winners = strings.Join(w[:min(3, len(w))], ", ") + fmt.Sprintf(", ... (%d)", len(w))
	}
	fmt.Println(slotLine(slot, v, winners, col, layout))
}

// slotLine is one slot's line: its columns line up whatever the replicas.
func slotLine(slot time.Time, v *slotView, winners string, col columnWidths, layout string) string {
	if v == nil {
		v = &slotView{}
	}
	// replica-2 before replica-10
	slices.SortFunc(v.lost, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	winner := v.winner
	if winner == "" {
		winner = "none"
	}
	lost := strings.Join(v.lost, ", ")
	if !col.name {
		lost = fmt.Sprintf("%d replicas", len(v.lost))
	}
	fence := "-"
	if v.fence != 0 {
		fence = strconv.FormatInt(v.fence, 10)
	}
	line := fmt.Sprintf("%s  winner %-*s  lost %-*s  fence %-16s  winners %s", slot.Format(layout), col.replica, winner,
		col.lost, lost, fence, winners)
	if len(v.other) > 0 {
		line += "  (" + strings.Join(v.other, "; ") + ")"
	}
	return line
}

// verdict checks the draws list itself: each slot must have exactly one
// draw. A slot without one is explained from its slot record.
func verdict(ctx context.Context, rdb redis.UniversalClient, l *lottery.Lottery, prefix string, slots []time.Time, seen map[int64]*slotView, layout string) int {
	draws, err := l.Draws(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		return 1
	}
	per := map[int64]int{}
	for _, d := range draws {
		per[d.Slot]++
	}
	drawn, dupes, missed := 0, 0, 0
	records, _ := slotstore.New(rdb, prefix)
	for _, s := range slots {
		switch n := per[s.Unix()]; {
		case n == 0:
			missed++
			why := "no slot record"
			if rec, ok, err := records.Record(ctx, lottery.Name, s); err == nil && ok {
				why = fmt.Sprintf("record: %s %s", rec.State, rec.Error)
			}
			fmt.Printf("%s  no draw (%s)\n", s.Format(layout), why)
		case n > 1:
			drawn++
			dupes++
		default:
			drawn++
		}
	}
	fmt.Printf("%s, %s, %s, %d missed\n", count(len(slots), "slot"), count(drawn, "draw"), count(dupes, "duplicate draw"), missed)
	if drawn != len(slots) || dupes > 0 || missed > 0 {
		return 1
	}
	return 0
}

// firstFreeSlot returns the first slot before which no earlier slot's draw
// holds the job. A draw of the slot before may outlast the interval on a
// busy machine, and the slot would be skipped: when the next slot is near
// (nearSlot), it looks lookBefore ahead of it, by when the draw of the slot
// before has started, and moves on a slot while a draw holds the job, for
// at most within. The slot's own claim, sent ahead of it, may hold the job
// then: that one is no reason to move on. A slot before it that is due
// after since (when the replicas started) and has no record yet is one
// too: its claim, late on a busy machine (its misfire grace allows it), may
// yet start a draw that holds the job. A slot further off needs no look: no
// draw holds the job that long.
func firstFreeSlot(ctx context.Context, rdb redis.UniversalClient, prefix string, sched scheduler.Schedule, since time.Time, within time.Duration) (time.Time, error) {
	store, err := slotstore.New(rdb, prefix)
	if err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(within)
	first := sched.Next(time.Now())
	for time.Until(first) < nearSlot {
		if wait := time.Until(first.Add(-lookBefore)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
		var before time.Time // the slot before first, if due since the replicas started
		for s := sched.Next(since); s.Before(first); s = sched.Next(s) {
			before = s
		}
		unclaimed := false
		if !before.IsZero() {
			_, ok, err := store.Record(ctx, lottery.Name, before)
			if err != nil {
				return time.Time{}, err
			}
			unclaimed = !ok
		}
		holder, at, _, err := store.Holder(ctx, lottery.Name)
		switch {
		case err != nil:
			return time.Time{}, err
		case (holder == "" || !at.Before(first)) && !unclaimed: // free, or held by first's own claim
			return first, nil
		case time.Now().After(deadline) && unclaimed:
			return time.Time{}, fmt.Errorf("slot %s has no record after %v: the replicas do not claim the job's slots", before.Format(time.TimeOnly), within)
		case time.Now().After(deadline):
			return time.Time{}, fmt.Errorf("the draw of slot %s on %s still holds the job after %v", at.Format(time.TimeOnly), holder, within)
		}
		first = sched.Next(first)
	}
	return first, nil
}

// nearSlot and lookBefore: see firstFreeSlot.
const (
	nearSlot   = 10 * time.Second
	lookBefore = 100 * time.Millisecond
)

// removeKeys deletes every key under prefix: the demo's, on a real Redis.
func removeKeys(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
	var batch []string
	flush := func() {
		if len(batch) > 0 {
			if err := rdb.Del(ctx, batch...).Err(); err != nil {
				fmt.Fprintf(os.Stderr, "lottery: removing the demo's keys: %v\n", err)
			} else {
				n += len(batch)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "lottery: removing the demo's keys: %v\n", err)
		return
	}
	// The replicas published the prefix in the registry of deployments that
	// every prefix on this Redis shares.
	if err := rdb.HDel(ctx, slotstore.DeploymentsKey, prefix).Err(); err != nil {
		fmt.Fprintf(os.Stderr, "lottery: removing the demo's entry in %s: %v\n", slotstore.DeploymentsKey, err)
	}
	fmt.Printf("removed the demo's %d keys (%s:*)\n", n, prefix)
}

// count writes n and a noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

//go:build compose

package deploy_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/examples/nap"
	"github.com/slotcron/slotcron/internal/otlptest"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
	"github.com/slotcron/slotcron/worker"
)

// The worker's log messages this test reads (scheduler/execute.go).
const (
	msgLeaseLost      = "lease lost: the job's context is cancelled"
	msgLeftToTakeover = "lease lost mid-run; leaving the slot to a takeover"
	msgJobFinished    = "job finished"
)

// stackRun is what the phases of TestComposeStack share.
type stackRun struct {
	s       *stack
	rdb     *redis.Client
	store   *slotstore.Store
	lot     *lottery.Lottery
	prefix  string
	ttl     time.Duration // lease.ttl
	renew   time.Duration // lease.renew_every
	lottery scheduler.Job // with its defaults
	nap     scheduler.Job
	workers map[string]string // replica ID -> compose service
	ids     []string          // the replica IDs, sorted
	from    time.Time         // the first lottery slot the test counts
	// collector receives the workers' traces; nil when they go to the
	// stack's Jaeger (SLOTCRON_STACK_JAEGER=1)
	collector *otlptest.Collector
}

// TestComposeStack runs deploy/compose.yaml's Redis and three workers (on
// deploy/compose/worker.yaml), with its published ports moved to free ones,
// under a project name of its own, and checks that:
//
//   - 20 lottery slots in a row are drawn once each, with rising fences, and
//     one slot's trace holds a root span from every replica;
//   - a worker cut off the network (docker network disconnect) mid-nap loses
//     its lease on time and its nap is woken, another worker runs the nap
//     again as attempt 2 (on_owner_lost: retry), the other two draw every
//     lottery slot meanwhile, and the cut worker, reconnected, is ready, in
//     the registry and drawing again without a restart;
//   - with every worker cut off for twice the misfire grace, each lottery
//     slot of the gap still gets a record: those that could no longer start
//     in time are recorded missed;
//   - no slot is ever drawn twice, and the fences of the draws rise.
//
// The workers export their traces over OTLP to a receiver in this test's
// process (internal/otlptest), which reads the slot's trace from it: CI
// does not build Jaeger (from source, 6 to 12 minutes). With
// SLOTCRON_STACK_JAEGER=1 it runs the stack as it ships instead, Jaeger
// included (built when its image is missing), and reads the trace from
// Jaeger's API.
//
// It builds the worker's image first (deploy/images/build.sh, which skips
// it when its inputs are unchanged). It needs Docker and Compose (v2's
// plugin or v1's docker-compose); without them it fails and says what to
// install. Run it with
//
//	go test -race -tags compose -run TestComposeStack -v -timeout 20m ./deploy
//	SLOTCRON_STACK_JAEGER=1 go test -race -tags compose -run TestComposeStack -v -timeout 30m ./deploy
func TestComposeStack(t *testing.T) {
	composeCmd := needDocker(t)
	r, portVars := readStack(t)
	withJaeger := os.Getenv("SLOTCRON_STACK_JAEGER") == "1"
	buildImages(t, withJaeger)
	var services []string
	for _, id := range r.ids {
		services = append(services, r.workers[id])
	}
	if !withJaeger {
		// On every interface, for the length of the test: the workers
		// reach it through Docker's bridge, not the host's loopback.
		r.collector = otlptest.Start(t, "0.0.0.0:0")
	}
	r.s = startStack(t, composeCmd, portVars, services, string(readFile(t, "compose/worker.yaml")), r.collector)
	r.rdb = redis.NewClient(&redis.Options{Addr: r.s.addr("redis", 6379)})
	t.Cleanup(func() { r.rdb.Close() })
	var err error
	if r.store, err = slotstore.New(r.rdb, r.prefix); err != nil {
		t.Fatal(err)
	}
	r.lot = lottery.New(r.rdb, r.prefix)

	began := time.Now()
	for _, id := range r.ids {
		svc := r.workers[id]
		addr := r.s.addr(svc, 8080)
		var said string
		if !eventually(90*time.Second, func() (ok bool) { ok, said = ready(addr); return ok }) {
			t.Fatalf("%s's /readyz (%s) did not answer 200 within 90s; last: %s", svc, addr, said)
		}
	}
	t.Logf("every worker's /readyz answers 200 after %v", time.Since(began).Round(100*time.Millisecond))

	for _, phase := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"TwentySlots", r.twentySlots},
		{"PartitionOneWorker", r.partitionOne},
		{"PartitionEveryWorker", r.partitionAll},
	} {
		if !t.Run(phase.name, phase.run) {
			return // the next phase assumes this one's state
		}
	}
	r.checkDraws(t)
}

// readStack reads what the test relies on from compose.yaml and the workers'
// config, and fails when they no longer say it.
func readStack(t *testing.T) (*stackRun, []string) {
	t.Helper()
	cfg := loadConfig(t, "compose/worker.yaml", readFile(t, "compose/worker.yaml"))
	r := &stackRun{prefix: cfg.Redis.KeyPrefix, ttl: cfg.Lease.TTL, renew: cfg.Lease.RenewEvery, workers: map[string]string{}}
	jobs := map[string]scheduler.Job{}
	for _, jc := range cfg.Jobs {
		jobs[jc.Name] = jobOf(jc).WithDefaults(cfg.Lease.TTL)
	}
	r.lottery, r.nap = jobs[lottery.Name], jobs[nap.Name]
	if r.lottery.Schedule != "@every 1s" {
		t.Fatalf("compose/worker.yaml: the lottery runs %q; this test counts slots of @every 1s", r.lottery.Schedule)
	}
	if r.nap.Name == "" || r.nap.OnOwnerLost != scheduler.OwnerLostRetry {
		t.Fatalf("compose/worker.yaml: this test needs the job nap with on_owner_lost: retry, got %+v", r.nap)
	}
	// The owner is cut 0.5s into its nap; its lease must be lost, at the
	// latest a TTL later, well before the nap would end.
	if lost := 500*time.Millisecond + r.ttl; lost > nap.Duration-2*time.Second {
		t.Fatalf("compose/worker.yaml: lease.ttl %v: a nap (%v) cut 0.5s in could end before its lease is lost", r.ttl, nap.Duration)
	}

	var f composeFile
	if err := yaml.Unmarshal(readFile(t, "compose.yaml"), &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	vars := map[int]string{}
	for name, svc := range f.Services {
		published(t, name, svc.Ports, vars)
		if svc.Image == workerImage {
			id := svc.Environment[worker.ReplicaIDEnv]
			r.workers[id] = name
			r.ids = append(r.ids, id)
		}
	}
	slices.Sort(r.ids)
	if len(r.ids) != 3 {
		t.Fatalf("compose.yaml: want 3 workers, found %q", r.ids)
	}
	return r, slices.Sorted(maps.Values(vars))
}

// jobOf is a config's job as the scheduler has it, as far as this test
// reads it.
func jobOf(jc worker.JobConfig) scheduler.Job {
	return scheduler.Job{Name: jc.Name, Schedule: jc.Schedule, MisfireGrace: jc.MisfireGrace,
		OnOwnerLost: scheduler.OwnerLost(jc.OnOwnerLost), MaxAttempts: jc.MaxAttempts}
}

// twentySlots lets the stack draw 20 lottery slots and checks each draw,
// then one slot's trace.
func (r *stackRun) twentySlots(t *testing.T) {
	first := time.Now().Truncate(time.Second).Add(2 * time.Second)
	last := first.Add(19 * time.Second)
	r.from = first
	sleepUntil(last.Add(2 * time.Second)) // the last draw is written within milliseconds
	draws := r.draws(t)
	var prev lottery.Entry
	wins := map[string]int{}
	for at := first; !at.After(last); at = at.Add(time.Second) {
		ds := draws[at.Unix()]
		if len(ds) != 1 {
			t.Errorf("lottery slot %s: %d draws %+v, want exactly one", at.Format(time.TimeOnly), len(ds), ds)
			continue
		}
		d := ds[0]
		if prev.Fence != 0 && d.Fence <= prev.Fence {
			t.Errorf("lottery slot %s: fence %d after %d (slot %d): fences must rise", at.Format(time.TimeOnly), d.Fence, prev.Fence, prev.Slot)
		}
		prev = d
		wins[d.Replica]++
		rec := r.record(t, lottery.Name, at)
		if rec.State != slot.StateDone || rec.Owner != d.Replica || rec.Fence != d.Fence {
			t.Errorf("lottery slot %s: record %s by %s fence %d, want done by %s fence %d (its draw)",
				at.Format(time.TimeOnly), rec.State, rec.Owner, rec.Fence, d.Replica, d.Fence)
		}
	}
	t.Logf("20 lottery slots %s..%s: one draw each, fences rising; slots won per replica: %v",
		first.Format(time.TimeOnly), last.Format(time.TimeOnly), wins)

	at := first.Add(10 * time.Second)
	if ds := draws[at.Unix()]; len(ds) == 1 {
		r.checkTrace(t, at, ds[0].Replica)
	}
}

// jaegerTrace is the part of Jaeger's /api/traces/{id} answer this test reads.
type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
			References    []any  `json:"references"`
			Tags          []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
			Tags        []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"processes"`
	} `json:"data"`
}

// rootSpan is a slot's root span in one replica: its name, the replica
// that sent it (service.instance.id) and its slotcron tags.
type rootSpan struct {
	Name, Instance string
	Tags           map[string]string
}

// roots reads a trace's root spans from Jaeger's API; none while Jaeger
// has none of it.
func roots(ui, id string) ([]rootSpan, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + ui + "/api/traces/" + id)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/traces/%s: %s", id, resp.Status)
	}
	var tr jaegerTrace
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		return nil, err
	}
	var out []rootSpan
	for _, d := range tr.Data {
		for _, sp := range d.Spans {
			if len(sp.References) > 0 {
				continue
			}
			rs := rootSpan{Name: sp.OperationName, Tags: map[string]string{}}
			for _, tag := range d.Processes[sp.ProcessID].Tags {
				if tag.Key == "service.instance.id" {
					rs.Instance = fmt.Sprint(tag.Value)
				}
			}
			for _, tag := range sp.Tags {
				rs.Tags[tag.Key] = fmt.Sprint(tag.Value)
			}
			out = append(out, rs)
		}
	}
	return out, nil
}

// received reads a trace's root spans from the spans c has received.
func received(c *otlptest.Collector, id string) []rootSpan {
	var out []rootSpan
	for _, sp := range c.Spans() {
		if len(sp.ParentSpanId) > 0 || hex.EncodeToString(sp.TraceId) != id {
			continue
		}
		rs := rootSpan{Name: sp.Name, Instance: sp.Instance, Tags: map[string]string{}}
		for _, kv := range sp.Attributes {
			rs.Tags[kv.Key] = otlptest.Text(kv.Value)
		}
		out = append(out, rs)
	}
	return out
}

// checkTrace reads a lottery slot's trace back, from the test's receiver or
// from Jaeger, by the ID every replica derives from the slot, and checks
// that it holds one claim's root span ("slot <outcome>") per replica: the
// winner's "slot won", the others' "slot lost" naming it. A loser whose
// claim found the run still going watches it, and may add a "slot.watch
// <outcome>" root span; no other root span belongs there.
func (r *stackRun) checkTrace(t *testing.T, at time.Time, winner string) {
	t.Helper()
	id := scheduler.SlotTraceID(r.prefix, lottery.Name, at).String()
	from, read := "the test's OTLP receiver", func() ([]rootSpan, error) { return received(r.collector, id), nil }
	if r.collector == nil {
		ui := r.s.addr("jaeger", 16686)
		from, read = "Jaeger", func() ([]rootSpan, error) { return roots(ui, id) }
	}
	var spans []rootSpan
	var err error
	claims := func() []string {
		var out []string
		for _, sp := range spans {
			if strings.HasPrefix(sp.Name, "slot ") {
				out = append(out, sp.Instance)
			}
		}
		slices.Sort(out)
		return out
	}
	// Each replica exports its spans in batches, every 5s at most.
	if !eventually(30*time.Second, func() bool {
		spans, err = read()
		return err == nil && len(slices.Compact(claims())) == len(r.ids)
	}) {
		hint := ""
		if r.collector != nil && len(r.collector.Spans()) == 0 {
			hint = fmt.Sprintf(" (it has received no span at all: can the containers reach this host's port %s through host.docker.internal? a firewall between Docker's bridges and the host would stop them)", r.collector.Addr)
		}
		t.Fatalf("trace %s of lottery slot %s: after 30s %s holds root spans %+v (error %v), want a claim's from each of %q%s",
			id, at.Format(time.TimeOnly), from, spans, err, r.ids, hint)
	}
	if got := claims(); !slices.Equal(got, r.ids) {
		t.Errorf("trace %s: claims' root spans from %q, want one from each of %q", id, got, r.ids)
	}
	var names []string
	for _, sp := range spans {
		names = append(names, sp.Instance+": "+sp.Name)
		if sp.Tags["slotcron.replica"] != sp.Instance || sp.Tags["slotcron.job"] != lottery.Name ||
			sp.Tags["slotcron.slot"] != at.UTC().Format(time.RFC3339) {
			t.Errorf("trace %s: root span %+v is not %s's span of lottery slot %s", id, sp, sp.Instance, at.UTC().Format(time.RFC3339))
		}
		switch {
		case sp.Name == "slot won" && sp.Instance == winner:
		case sp.Name == "slot lost" && sp.Instance != winner && sp.Tags["slotcron.holder"] == winner:
		case strings.HasPrefix(sp.Name, "slot.watch ") && sp.Instance != winner:
		default:
			t.Errorf("trace %s: root span %q of %s (holder %q); the draw's winner is %s",
				id, sp.Name, sp.Instance, sp.Tags["slotcron.holder"], winner)
		}
	}
	slices.Sort(names)
	t.Logf("trace %s of lottery slot %s, as %s holds it: %s", id, at.Format(time.TimeOnly), from, strings.Join(names, ", "))
}

// partitionOne cuts the worker running a nap off the network for longer
// than two lease TTLs, mid-nap, and reconnects it.
func (r *stackRun) partitionOne(t *testing.T) {
	ctx := context.Background()
	sched, err := scheduler.ParseSchedule(r.nap.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	// What a cut must not wait for: each worker's container and start.
	before := map[string]string{}
	for _, svc := range r.workers {
		before[svc] = r.s.started(svc)
	}
	at := sched.Next(time.Now().Add(time.Second))
	sleepUntil(at.Add(200 * time.Millisecond))
	var owner string
	if !eventually(time.Second, func() bool {
		var held time.Time
		owner, held, _, err = r.store.Holder(ctx, nap.Name)
		return err == nil && owner != "" && held.Equal(at)
	}) {
		t.Fatalf("no worker holds the nap of %s (holder %q, error %v)", at.Format(time.TimeOnly), owner, err)
	}
	first := r.record(t, nap.Name, at)
	if first.State != slot.StateRunning || first.Owner != owner || first.Attempt != 1 {
		t.Fatalf("nap %s: record %+v, want running by %s, attempt 1", at.Format(time.TimeOnly), first, owner)
	}
	svc := r.workers[owner]

	// The cut lands mid-second, between two lottery runs (each takes a
	// millisecond after its second): a lottery run cut too would be
	// abandoned, and the next slots skipped while its lease lives, which is
	// right but not what this phase checks.
	sleepUntil(at.Add(500 * time.Millisecond))
	cut := time.Now()
	r.s.disconnect(svc)
	cutDone := time.Now()
	if cutDone.Sub(at) > 900*time.Millisecond {
		t.Fatalf("docker network disconnect took from %v to %v into the second; the cut must land between two lottery slots",
			cut.Sub(at).Round(time.Millisecond), cutDone.Sub(at).Round(time.Millisecond))
	}
	back := false
	defer func() {
		if !back {
			r.s.connect(svc)
		}
	}()
	sleepUntil(cut.Add(2*r.ttl + 2*time.Second))
	reconnect := time.Now()
	r.s.connect(svc)
	back = true
	backDone := time.Now()
	t.Logf("cut %s (%s, the nap's owner) off at %s, %v into its nap, for %v", owner, svc,
		cut.Format("15:04:05.000"), cut.Sub(at).Round(time.Millisecond), reconnect.Sub(cut).Round(time.Millisecond))

	// Its lease is lost on time: within one TTL of the cut, counted from the
	// last renewal Redis confirmed, at most renew_every before the cut.
	lines := r.s.logs(svc)
	ofNap := func(msg string) []logLine {
		var out []logLine
		for _, l := range lines {
			if l.Msg == msg && l.attr("slotcron.job") == nap.Name && l.attr("slotcron.slot") == at.UTC().Format(time.RFC3339) {
				out = append(out, l)
			}
		}
		return out
	}
	lost, left := ofNap(msgLeaseLost), ofNap(msgLeftToTakeover)
	if len(lost) != 1 || len(left) != 1 {
		t.Fatalf("%s's log has %d %q and %d %q lines for the nap %s, want one each",
			svc, len(lost), msgLeaseLost, len(left), msgLeftToTakeover, at.Format(time.TimeOnly))
	}
	earliest, latest := cut.Add(r.ttl-r.renew-250*time.Millisecond), cutDone.Add(r.ttl+time.Second)
	if lost[0].Time.Before(earliest) || lost[0].Time.After(latest) {
		t.Errorf("%s lost its lease %v after the cut; want between %v and %v (lease.ttl %v, renewed every %v)", owner,
			lost[0].Time.Sub(cut).Round(time.Millisecond), earliest.Sub(cut).Round(time.Millisecond),
			latest.Sub(cut).Round(time.Millisecond), r.ttl, r.renew)
	}
	if e := lost[0].attr("error"); !strings.Contains(e, slot.ErrLeaseLost.Error()) {
		t.Errorf("%s's lease-lost line says %q, want the cause %q", svc, e, slot.ErrLeaseLost)
	}
	// Its nap was woken: the job returned, with the cause, before its end.
	if e := left[0].attr("error"); !strings.HasPrefix(e, "nap: woken after ") || !strings.Contains(e, slot.ErrLeaseLost.Error()) {
		t.Errorf("the nap %s on %s ended with %q, want a nap woken by %q", at.Format(time.TimeOnly), owner, e, slot.ErrLeaseLost)
	}
	if d := left[0].Time.Sub(lost[0].Time); d < 0 || d > time.Second || !left[0].Time.Before(at.Add(nap.Duration)) {
		t.Errorf("the nap %s returned %v after its lease was lost, at %s; want within 1s, before its %v were over",
			at.Format(time.TimeOnly), d.Round(time.Millisecond), left[0].Time.Format("15:04:05.000"), nap.Duration)
	}
	if n := len(ofNap(msgJobFinished)); n != 0 {
		t.Errorf("%s logged %q %d times for the nap it lost", svc, msgJobFinished, n)
	}
	t.Logf("%s: lease lost %v after the cut; its nap returned %v later: %s", owner,
		lost[0].Time.Sub(cut).Round(time.Millisecond), left[0].Time.Sub(lost[0].Time).Round(time.Microsecond), left[0].attr("error"))

	// Another worker settles the slot by its policy: retry, as attempt 2.
	var rec slot.Record
	if !eventually(r.ttl+nap.Duration+15*time.Second, func() bool {
		rec = r.record(t, nap.Name, at)
		return rec.State != slot.StateRunning
	}) {
		t.Fatalf("nap %s: still %+v", at.Format(time.TimeOnly), rec)
	}
	if rec.State != slot.StateDone || rec.Attempt != 2 || rec.Owner == owner || rec.Fence <= first.Fence {
		t.Errorf("nap %s: record %+v; want done, attempt 2, by another worker than %s, fence above %d", at.Format(time.TimeOnly), rec, owner, first.Fence)
	} else {
		t.Logf("nap %s: taken over and done by %s as attempt 2 (fence %d after %d)", at.Format(time.TimeOnly), rec.Owner, rec.Fence, first.Fence)
	}

	// The cut worker rejoins without a restart: ready, in the registry, and
	// drawing again.
	if after := r.s.started(svc); after != before[svc] {
		t.Errorf("%s was restarted: %s, then %s", svc, before[svc], after)
	}
	addr := r.s.addr(svc, 8080) // a new port since the reconnect
	var said string
	if !eventually(20*time.Second, func() (ok bool) { ok, said = ready(addr); return ok }) {
		t.Errorf("%s's /readyz did not answer 200 within 20s of the reconnect; last: %s", svc, said)
	}
	var seen time.Time
	if !eventually(20*time.Second, func() bool {
		reg, err := r.store.Registry(ctx, 15*time.Second)
		for _, rep := range reg.Replicas {
			if rep.ID == owner {
				seen = rep.Seen
			}
		}
		return err == nil && seen.After(backDone)
	}) {
		t.Errorf("%s's heartbeat is not in the registry since the reconnect (last seen %s)", owner, seen.Format("15:04:05.000"))
	}
	var drawn int64
	if !eventually(30*time.Second, func() bool {
		for _, ds := range r.draws(t) {
			for _, d := range ds {
				if d.Replica == owner && time.Unix(d.Slot, 0).After(backDone) {
					drawn = d.Slot
					return true
				}
			}
		}
		return false
	}) {
		t.Errorf("%s drew no lottery slot within 30s of the reconnect", owner)
	}
	t.Logf("%s: same process (%s); ready, heartbeat seen %s, drew the slot %s again, after the reconnect at %s", owner, before[svc],
		seen.Format("15:04:05.000"), time.Unix(drawn, 0).Format(time.TimeOnly), backDone.Format("15:04:05.000"))

	// Meanwhile the other two drew every lottery slot, on time.
	cutFrom, cutTo := cutDone.Truncate(time.Second).Add(time.Second), reconnect.Truncate(time.Second)
	r.settled(t, cutFrom.Add(-2*time.Second), backDone.Truncate(time.Second).Add(time.Second), func(at time.Time, rec slot.Record) string {
		if rec.State != slot.StateDone {
			return "want done: two workers answered"
		}
		if !at.Before(cutFrom) && !at.After(cutTo) && rec.Owner == owner {
			return "want another owner than the cut worker"
		}
		return ""
	})
}

// partitionAll cuts every worker off the network for twice the lottery's
// misfire grace, when no nap runs, and reconnects them.
func (r *stackRun) partitionAll(t *testing.T) {
	sched, err := scheduler.ParseSchedule(r.nap.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	// After a nap's end, mid-second (see partitionOne).
	afterNap := nap.Duration + 1500*time.Millisecond
	start := sched.Next(time.Now().Add(-afterNap)).Add(afterNap)
	if time.Until(start) < 500*time.Millisecond {
		start = sched.Next(start.Add(-afterNap)).Add(afterNap)
	}
	sleepUntil(start)
	gap := 2 * r.lottery.MisfireGrace
	cut := time.Now()
	var cutOff []string
	defer func() {
		for _, svc := range cutOff {
			r.s.connect(svc)
		}
	}()
	for _, id := range r.ids {
		r.s.disconnect(r.workers[id])
		cutOff = append(cutOff, r.workers[id])
	}
	allCut := time.Now()
	sleepUntil(cut.Add(gap))
	reconnect := time.Now()
	for len(cutOff) > 0 {
		r.s.connect(cutOff[0])
		cutOff = cutOff[1:]
	}
	allBack := time.Now()
	t.Logf("cut every worker off from %s (all by %s) to %s (all back by %s); misfire_grace %v",
		cut.Format("15:04:05.000"), allCut.Format("15:04:05.000"), reconnect.Format("15:04:05.000"),
		allBack.Format("15:04:05.000"), r.lottery.MisfireGrace)

	// No worker could claim a slot from allCut until the reconnect; one
	// whose misfire grace ran out before it can only have been missed. A
	// claim goes out up to a quarter of the job's period ahead of its slot,
	// so a slot that soon after allCut may have been won before it.
	lsched, err := scheduler.ParseSchedule(r.lottery.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	next := lsched.Next(allCut)
	gapFrom := lsched.Next(allCut.Add(lsched.Next(next).Sub(next) / 4).Add(-time.Nanosecond))
	states := r.settled(t, cut.Truncate(time.Second), allBack.Truncate(time.Second).Add(time.Second), func(at time.Time, rec slot.Record) string {
		if !at.Before(gapFrom) && at.Add(r.lottery.MisfireGrace).Before(reconnect) && rec.State != slot.StateMissed {
			return "want missed: its misfire grace ran out before any worker reached Redis"
		}
		return ""
	})
	if states[slot.StateMissed] == 0 {
		t.Errorf("no lottery slot of the gap was recorded missed")
	}
	// A nap of the gap, if any, gets a record too.
	for at := sched.Next(cut.Add(-time.Second)); at.Before(allBack); at = sched.Next(at) {
		var rec slot.Record
		if !eventually(r.ttl+nap.Duration+30*time.Second, func() bool {
			rec = r.record(t, nap.Name, at)
			return rec.State != "" && rec.State != slot.StateRunning
		}) {
			t.Errorf("nap %s of the gap: record %+v, want a final one", at.Format(time.TimeOnly), rec)
		} else {
			t.Logf("nap %s of the gap: %s (attempt %d, by %s)", at.Format(time.TimeOnly), rec.State, rec.Attempt, rec.Owner)
		}
	}
}

// settled waits until every lottery slot from..to has a final record (30s
// at most after to), then checks each: a done slot has exactly one draw by
// its owner with its fence, any other none; check says what else is wrong
// with a record ("" for nothing). It returns how many slots ended in each
// state, and logs it.
func (r *stackRun) settled(t *testing.T, from, to time.Time, check func(time.Time, slot.Record) string) map[slot.State]int {
	t.Helper()
	recs := map[int64]slot.Record{}
	final := func() bool {
		for at := from; !at.After(to); at = at.Add(time.Second) {
			rec := r.record(t, lottery.Name, at)
			recs[at.Unix()] = rec
			if rec.State == "" || rec.State == slot.StateRunning {
				return false
			}
		}
		return true
	}
	eventually(time.Until(to.Add(30*time.Second)), final)
	draws := r.draws(t)
	states := map[slot.State]int{}
	var each []string
	for at := from; !at.After(to); at = at.Add(time.Second) {
		rec, ds := recs[at.Unix()], draws[at.Unix()]
		states[rec.State]++
		each = append(each, fmt.Sprintf("%s %s", at.Format("05"), rec.State))
		switch rec.State {
		case slot.StateDone:
			each[len(each)-1] += fmt.Sprintf(" by %s, %v late", rec.Owner, rec.Started.Sub(at).Round(time.Millisecond))
		case slot.StateMissed, "":
		default:
			each[len(each)-1] += fmt.Sprintf(" (%s: %s)", rec.Owner, rec.Error)
		}
		var why string
		switch {
		case rec.State == "":
			why = "no record"
		case rec.State == slot.StateRunning:
			why = "still running 30s later"
		case rec.State == slot.StateDone && (len(ds) != 1 || ds[0].Replica != rec.Owner || ds[0].Fence != rec.Fence):
			why = fmt.Sprintf("want exactly one draw, by %s with fence %d", rec.Owner, rec.Fence)
		case rec.State != slot.StateDone && len(ds) != 0:
			why = "want no draw"
		default:
			why = check(at, rec)
		}
		if why != "" {
			t.Errorf("lottery slot %s: %s by %s (attempt %d, %q), draws %+v: %s",
				at.Format(time.TimeOnly), rec.State, rec.Owner, rec.Attempt, rec.Error, ds, why)
		}
	}
	t.Logf("lottery slots %s..%s: %v; by second: %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly), states, strings.Join(each, "; "))
	return states
}

// checkDraws checks every draw of the run: no slot drawn twice, and fences
// that rise in the order the draws were written.
func (r *stackRun) checkDraws(t *testing.T) {
	all, err := r.lot.Draws(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]int{}
	for i, d := range all {
		if d.Manual != "" {
			continue
		}
		if slots[d.Slot]++; slots[d.Slot] == 2 {
			t.Errorf("lottery slot %s was drawn twice", time.Unix(d.Slot, 0).Format(time.TimeOnly))
		}
		if i > 0 && d.Fence <= all[i-1].Fence {
			t.Errorf("draw %d (slot %s, fence %d) was written after fence %d", i, time.Unix(d.Slot, 0).Format(time.TimeOnly), d.Fence, all[i-1].Fence)
		}
	}
	t.Logf("%d draws in all, none of a slot drawn before, fences rising in the order written", len(all))
}

// draws returns the lottery's scheduled draws by slot.
func (r *stackRun) draws(t *testing.T) map[int64][]lottery.Entry {
	t.Helper()
	all, err := r.lot.Draws(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]lottery.Entry{}
	for _, d := range all {
		if d.Manual == "" {
			out[d.Slot] = append(out[d.Slot], d)
		}
	}
	return out
}

// record returns a slot's record; its State is "" when it has none.
func (r *stackRun) record(t *testing.T, job string, at time.Time) slot.Record {
	t.Helper()
	rec, _, err := r.store.Record(context.Background(), job, at)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

func quiet(t *testing.T) map[string]jobs.Func {
	return map[string]jobs.Func{"j": func(context.Context, jobs.Run) error { return nil }, "k": func(context.Context, jobs.Run) error { return nil }}
}

// TestReplicasThatDisagreeAreDetected: mid-deploy, one replica runs job j
// every second, another every two seconds and a job k too; a third runs j
// under another key prefix on the same Redis. Each finds the disagreements
// through the registry, and says which.
func TestReplicasThatDisagreeAreDetected(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		a := h.start("a", registry(t, quiet(t)), []scheduler.Job{{Name: "j", Schedule: "@every 1s"}})
		b := h.start("b", registry(t, quiet(t)), []scheduler.Job{{Name: "j", Schedule: "@every 2s"}, {Name: "k", Schedule: "@daily"}})
		other := h.startWith("c", replicaOpts{prefix: "other"}, registry(t, quiet(t)), []scheduler.Job{{Name: "j", Schedule: "@every 1s"}})
		time.Sleep(2 * scheduler.DefaultHeartbeatEvery)

		reg, dis := a.s.Replicas()
		if len(reg.Replicas) != 2 {
			t.Fatalf("a sees %d live replicas, want 2 (a, b): %+v", len(reg.Replicas), reg.Replicas)
		}
		want := []string{
			`job j: b runs it with schedule="@every 2s"; this replica with schedule="@every 1s"`,
			`job j also runs under key prefix other on this Redis: each prefix runs its slots`,
			`job k: b runs it, this replica does not`,
		}
		if len(dis) != len(want) {
			t.Fatalf("a's disagreements: %v, want %d", dis, len(want))
		}
		for i, w := range want {
			if dis[i].String() != w {
				t.Errorf("a's disagreement %d: %q, want %q", i, dis[i], w)
			}
		}
		if _, dis := b.s.Replicas(); len(dis) != 3 { // j with a, k with a, j under prefix other
			t.Errorf("b's disagreements: %v, want 3", dis)
		}
		if _, dis := other.s.Replicas(); len(dis) != 1 || dis[0].Peer != "prefix sc" {
			t.Errorf("c's disagreements: %v, want job j under prefix sc", dis)
		}
	})
}

// TestDuplicateReplicaIDRefused: a second process with a live replica's ID
// waits three heartbeats (it could be that replica's crashed successor),
// sees the first still beating, and refuses to start, saying why. The first
// goes on.
func TestDuplicateReplicaIDRefused(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s"}}
		first := h.start("a", registry(t, quiet(t)), table)
		time.Sleep(time.Second)
		began := time.Now()
		second := h.start("a", registry(t, quiet(t)), table)
		select {
		case <-second.done:
		case <-time.After(time.Minute):
			t.Fatal("the second process with ID a is still running a minute later")
		}
		if !errors.Is(second.runErr, slot.ErrDuplicateReplica) || !strings.Contains(second.runErr.Error(), `"a" is live in another process`) {
			t.Fatalf("second Run: %v, want ErrDuplicateReplica naming a", second.runErr)
		}
		if took := time.Since(began); took < 3*scheduler.DefaultHeartbeatEvery {
			t.Fatalf("refused after %v, before the predecessor's entry could go stale", took)
		}
		select {
		case <-first.done:
			t.Fatalf("the first process stopped: %v", first.runErr)
		default:
		}
		if reg, _ := first.s.Replicas(); len(reg.Replicas) != 1 || reg.Replicas[0].ID != "a" {
			t.Fatalf("registry after the refusal: %+v", reg.Replicas)
		}
	})
}

// TestCrashedPredecessorsIDIsReused: a replica crashes (nothing of it reaches
// Redis again) and is restarted at once with its ID, as an orchestrator does.
// The new process waits until the old entry goes stale, then starts and runs
// the job.
func TestCrashedPredecessorsIDIsReused(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		key := "starts"
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s"}}
		reg := func() *jobs.Registry { return registry(t, map[string]jobs.Func{"j": recorder(h.rdb, key, 0)}) }
		old := h.start("a", reg(), table)
		time.Sleep(2 * time.Second)
		old.net.freeze()
		crashed := time.Now()
		h.start("a", reg(), table)
		time.Sleep(4 * scheduler.DefaultHeartbeatEvery)
		var after []start
		for _, s := range h.starts(key) {
			if time.Unix(s.slot, 0).After(crashed) {
				after = append(after, s)
			}
		}
		if len(after) == 0 {
			t.Fatal("the restarted replica ran nothing")
		}
		if took := time.Unix(after[0].slot, 0).Sub(crashed); took > 3*scheduler.DefaultHeartbeatEvery+2*time.Second {
			t.Fatalf("the restarted replica's first run came %v after the crash", took)
		}
	})
}

// TestReplicasWithAnotherMaxSkewDisagree: mid-deploy, replica b runs with
// max_skew 500ms, a with the default 2s, and a replica of an older version
// publishes none. a and b each find the other's max_skew through the
// registry: warned once, counted in slotcron.replica_disagreements, and
// listed by Replicas. The older replica is no disagreement. Once b has
// left, a agrees again.
func TestReplicasWithAnotherMaxSkewDisagree(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var logs lines
		metrics := sdkmetric.NewManualReader()
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s"}}
		a := h.start("a", registry(t, quiet(t)), table,
			scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))),
			scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
		b := h.start("b", registry(t, quiet(t)), table, scheduler.WithSkewLimits(250*time.Millisecond, 500*time.Millisecond))
		time.Sleep(time.Second)
		reg, _ := a.s.Replicas()
		if len(reg.Replicas) == 0 {
			t.Fatal("a sees no replica")
		}
		now := h.rdb.Time(context.Background()).Val()
		h.rdb.HSet(context.Background(), h.prefix+":replicas", "old", "o-1 "+strconv.FormatInt(now.UnixMilli(), 10)+
			` {"version":"v0.9.0","protocol":2,"started_ms":1,"offset_ns":0,"table":"`+reg.Replicas[0].Table+`"}`)
		time.Sleep(2 * scheduler.DefaultHeartbeatEvery)

		reg, dis := a.s.Replicas()
		if len(reg.Replicas) != 3 {
			t.Fatalf("a sees %d live replicas, want 3 (a, b, old): %+v", len(reg.Replicas), reg.Replicas)
		}
		want := "replica settings: b runs with max_skew=500ms; this replica with max_skew=2s"
		if len(dis) != 1 || dis[0].String() != want {
			t.Fatalf("a's disagreements: %q, want one: %q", dis, want)
		}
		if _, dis := b.s.Replicas(); len(dis) != 1 || dis[0].String() != "replica settings: a runs with max_skew=2s; this replica with max_skew=500ms" {
			t.Errorf("b's disagreements: %q, want a's max_skew", dis)
		}
		warned := 0
		for _, l := range logs.all() {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, `msg="replicas disagree: `+want+`"`) && strings.Contains(l, "peer=b") {
				warned++
			}
		}
		if warned != 1 {
			t.Errorf("a warned %d times of b's max_skew over two heartbeats, want once:\n%s", warned, strings.Join(logs.all(), "\n"))
		}
		if n := disagreementsGauge(t, metrics); n != 1 {
			t.Errorf("slotcron.replica_disagreements = %d, want 1", n)
		}
		b.stop()
		<-b.done
		time.Sleep(scheduler.DefaultHeartbeatEvery)
		if _, dis := a.s.Replicas(); len(dis) != 0 {
			t.Errorf("a's disagreements once b left: %q", dis)
		}
		if n := disagreementsGauge(t, metrics); n != 0 {
			t.Errorf("slotcron.replica_disagreements = %d once b left, want 0", n)
		}
		if l := strings.Join(logs.all(), "\n"); !strings.Contains(l, "replicas agree again") {
			t.Errorf("a did not log that the replicas agree again:\n%s", l)
		}
	})
}

// disagreementsGauge is slotcron.replica_disagreements's last value.
func disagreementsGauge(t *testing.T, metrics *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "slotcron.replica_disagreements" && len(g.DataPoints) == 1 {
				return g.DataPoints[0].Value
			}
		}
	}
	t.Fatal("no slotcron.replica_disagreements")
	return 0
}

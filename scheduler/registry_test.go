package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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

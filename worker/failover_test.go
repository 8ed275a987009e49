package worker

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestSentinelFailover runs 3 workers with redis.mode sentinel (a master, a
// replica, 3 sentinels, each a real redis-server) and forces a failover in
// the middle of the run. The workers must reach the new master on their own;
// no slot may start twice with one fence; and every slot must end with a
// record on the new master, or be reported, at ERROR, as lost to the
// failover. The workers wait for 1 replica to acknowledge each batch of
// claims (redis.wait_replicas), as a user who wants that window narrow would.
func TestSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	sentinelFailover(t, s, s.Failover, false)
}

// sentinelFailover is TestSentinelFailover's run and its checks, on the
// deployment s, with the failover forced by failover, which returns once the
// sentinels name the new master and it answers as one.
//
// outage says that the failover leaves the workers with no master for longer
// than the lease TTL (2s), as a master that crashes does: the sentinels take
// 1s to judge it down, then vote. The README's guarantees allow two more
// records then, around the outage, and the compose stack's cut test sees both:
// a slot whose run held the job when the workers came back is recorded
// skipped (overlap: skip), and a run whose owner could not renew its lease is
// abandoned by another replica (on_owner_lost: abandon). With outage, a slot
// may end so from one TTL before the failover began until 1s after the
// workers were back (the first run that started once it was done; the claims
// sent during the outage wait out their 5s timeout, so this can come later
// than the failover), each checked: a skipped slot's record must name the
// run that held the job, and that run must have started there; an abandoned
// slot's run must have started on the owner its record names. Every other
// check is the same.
func sentinelFailover(t *testing.T, s *redistest.Sentinel, failover func() (from, to string), outage bool) {
	const leaseTTL = 2 * time.Second
	type run struct {
		slot    int64
		fence   int64
		replica string
		started time.Time
	}
	var (
		mu   sync.Mutex
		runs []run
	)
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, r jobs.Run) error {
			mu.Lock()
			runs = append(runs, run{r.Slot.Unix(), r.Fence, r.Replica, time.Now()})
			mu.Unlock()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs []*syncBuffer
	exits := make(chan int, 3)
	for r := 1; r <= 3; r++ {
		path := writeConfig(t, fmt.Sprintf(`replica_id: r%d
redis:
  mode: sentinel
  addrs: [%s]
  master_name: %s
  key_prefix: fo
  wait_replicas: 1
lease:
  ttl: %v
http:
  listen: ""
shutdown_grace: 3s
jobs:
  - name: tick
    schedule: "@every 1s"
`, r, strings.Join(s.Addrs(), ", "), redistest.MasterName, leaseTTL))
		var stderr syncBuffer
		logs = append(logs, &stderr)
		go func() { exits <- Command(ctx, []string{"run", "-config", path}, register, io.Discard, &stderr) }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, l := range logs {
		for !strings.Contains(l.String(), `"msg":"scheduler started"`) {
			if time.Now().After(deadline) {
				t.Fatalf("a worker did not start within 30s:\n%s", l.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(first.Add(3 * time.Second)))
	began := time.Now()
	from, to := failover()
	done := time.Now()
	t.Logf("failover from %s to %s took %v", from, to, done.Sub(began).Round(time.Millisecond))
	time.Sleep(8 * time.Second) // enough for every replica to reconnect, with room for a busy machine
	last := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	cancel()
	for range logs {
		if code := <-exits; code != 0 {
			t.Errorf("a worker exited %d", code)
		}
	}

	// Read the records from the new master, through the sentinels.
	store, _ := slotstore.New(s.Client(), "fo")
	mu.Lock()
	defer mu.Unlock()
	seen := map[[2]int64]string{}
	starts := map[int64]int{}
	for _, r := range runs {
		k := [2]int64{r.slot, r.fence}
		if other, ok := seen[k]; ok {
			t.Errorf("slot %d started twice with fence %d: on %s and %s", r.slot, r.fence, other, r.replica)
		}
		seen[k] = r.replica
		starts[r.slot]++
	}
	var lines []string
	for _, l := range logs {
		lines = append(lines, strings.Split(l.String(), "\n")...)
	}
	// reported finds a log line at ERROR that says Redis lost this slot's
	// data, or that its final record was not replicated in time (the
	// failover can lose a record after its run finished).
	reported := func(slotAttr string) string {
		for _, line := range lines {
			if strings.Contains(line, slotAttr) && strings.Contains(line, `"level":"ERROR"`) &&
				(strings.Contains(line, "Redis lost data") || strings.Contains(line, "a failover now could lose the record")) {
				return line
			}
		}
		return ""
	}
	// back is when the workers were back: the first run that started once
	// the failover was done.
	var back time.Time
	for _, r := range runs {
		if r.started.After(done) && (back.IsZero() || r.started.Before(back)) {
			back = r.started
		}
	}
	if back.IsZero() {
		back = done
	}
	ranOn := func(slotUnix int64, replica string) bool {
		for _, r := range runs {
			if r.slot == slotUnix && r.replica == replica {
				return true
			}
		}
		return false
	}
	// wonOn reports whether replica won the slot: its job ran there, or its
	// lease was lost before the job could start (the claim's answer came
	// late in the outage), which it logged. Either way its lease held the
	// job in Redis.
	wonOn := func(slotUnix int64, replica string) bool {
		if ranOn(slotUnix, replica) {
			return true
		}
		slotAttr := `"slotcron.slot":"` + time.Unix(slotUnix, 0).UTC().Format(time.RFC3339) + `"`
		for _, line := range lines {
			if strings.Contains(line, slotAttr) && strings.Contains(line, `"slotcron.replica":"`+replica+`"`) && strings.Contains(line, `"msg":"won slot not started"`) {
				return true
			}
		}
		return false
	}
	// aroundOutage says why rec, a slot's record other than done, is one
	// that outage allows, or returns "".
	aroundOutage := func(at time.Time, rec slot.Record) string {
		if !outage || at.Before(began.Add(-leaseTTL)) || at.After(back.Add(time.Second)) {
			return ""
		}
		switch rec.State {
		case slot.StateSkipped:
			var name, holder string
			if _, err := fmt.Sscanf(rec.Error, "overlap: the run of slot %s on %s still holds the job", &name, &holder); err != nil {
				return ""
			}
			held, err := time.Parse(time.RFC3339, name)
			if err != nil || !wonOn(held.Unix(), holder) {
				return ""
			}
			return fmt.Sprintf("skipped: the run of slot %s on %s held the job", held.Format(time.TimeOnly), holder)
		case slot.StateAbandoned:
			switch {
			case strings.Contains(rec.Error, "lost its lease") && ranOn(at.Unix(), rec.Owner):
				return fmt.Sprintf("abandoned: its run started, and its owner %s could not renew its lease while no master answered", rec.Owner)
			case strings.HasPrefix(rec.Error, "the job did not start") && strings.Contains(rec.Error, "lease lost") && wonOn(at.Unix(), rec.Owner):
				return fmt.Sprintf("abandoned: its owner %s won it, but its lease was lost before the job could start", rec.Owner)
			}
		}
		return ""
	}
	recorded, lost, around := 0, 0, 0
	for at := first; !at.After(last); at = at.Add(time.Second) {
		rec, ok, err := store.Record(context.Background(), "tick", at)
		if err != nil {
			t.Fatal(err)
		}
		slotAttr := `"slotcron.slot":"` + at.UTC().Format(time.RFC3339) + `"`
		switch {
		case ok && rec.State == slot.StateDone:
			recorded++
			if at.After(done.Add(3*time.Second)) && starts[at.Unix()] != 1 {
				t.Errorf("slot %s after the failover started %d times", at.Format(time.TimeOnly), starts[at.Unix()])
			}
		case reported(slotAttr) != "":
			lost++
			t.Logf("slot %s: no record on the new master, reported lost to the failover: %s", at.Format(time.TimeOnly), reported(slotAttr))
		case ok && aroundOutage(at, rec) != "":
			around++
			t.Logf("slot %s: recorded %s", at.Format(time.TimeOnly), aroundOutage(at, rec))
		default:
			t.Errorf("slot %s: record %+v (found %v), %d starts; want done, or reported lost", at.Format(time.TimeOnly), rec, ok, starts[at.Unix()])
			for _, line := range lines {
				if strings.Contains(line, slotAttr) {
					t.Log(line)
				}
			}
		}
		if starts[at.Unix()] > 1 {
			t.Logf("slot %s started %d times, with different fences: the failover lost its first claim", at.Format(time.TimeOnly), starts[at.Unix()])
		}
	}
	if recorded < 5 {
		t.Errorf("only %d slots recorded done", recorded)
	}
	if outage {
		t.Logf("the workers were back %v after the failover began", back.Sub(began).Round(time.Millisecond))
		t.Logf("%d slots: %d done on the new master, %d reported lost to the failover, %d skipped or abandoned around the outage",
			last.Sub(first)/time.Second+1, recorded, lost, around)
		return
	}
	t.Logf("%d slots: %d done on the new master, %d reported lost to the failover", last.Sub(first)/time.Second+1, recorded, lost)
}

// TestSentinelFailoverContainers is TestSentinelFailover with each server and
// sentinel in a container of its own, on a Docker network of its own, and the
// failover forced as a crash forces it: the master's container is stopped
// (docker stop), and the sentinels notice it down after 1s, agree and promote
// the replica. The new master must be the former replica. The checks are
// TestSentinelFailover's, with the records an outage longer than the lease
// TTL allows around it (see sentinelFailover). The old master stays down, so
// the new one has no replica to acknowledge wait_replicas. It needs Docker
// and fails, saying what to install, where none answers; TestSentinelFailover
// runs without it.
func TestSentinelFailoverContainers(t *testing.T) {
	s := redistest.StartSentinelContainers(t)
	replica := s.Replica()
	sentinelFailover(t, s, func() (from, to string) {
		from, to = s.StopMaster()
		if to != replica {
			t.Errorf("the sentinels promoted %s, want the former replica %s", to, replica)
		}
		return from, to
	}, true)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/internal/gotool"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// buildWorker compiles this command once per test.
func buildWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "worker")
	out, err := gotool.Command("build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestWorkersUnderFaults runs three worker processes with the lottery at
// @every 1s for 10 slots. One is killed with SIGKILL; another is frozen with
// SIGSTOP for longer than the lease TTL, then resumed. No slot may be drawn
// twice, and every slot must have a draw or a slot record that says why not.
// worker status must print exactly the slot records.
func TestWorkersUnderFaults(t *testing.T) {
	bin := buildWorker(t)
	srv := redistest.StartOwned(t) // the default key prefix: a server of our own
	dir := t.TempDir()
	config := func(id string) string {
		path := filepath.Join(dir, id+".yaml")
		body := fmt.Sprintf(`replica_id: %s
redis:
  addrs: [%q]
lease:
  ttl: 1s
http:
  listen: ""
shutdown_grace: 2s
jobs:
  - name: lottery
    schedule: "@every 1s"
`, id, srv.Addr())
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	type proc struct {
		id   string
		cmd  *exec.Cmd
		logs lockedBuffer
	}
	var procs []*proc
	for _, id := range []string{"alpha", "bravo", "charlie"} {
		p := &proc{id: id}
		p.cmd = exec.Command(bin, "run", "-config", config(id))
		p.cmd.Stderr = &p.logs
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}()

	// The slots under test begin once every worker has started: a busy
	// machine may take seconds to start three processes.
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range procs {
		for !strings.Contains(p.logs.String(), `"msg":"scheduler started"`) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start within 30s; logs:\n%s", p.id, p.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
	const n = 10
	last := first.Add((n - 1) * time.Second)

	// alpha dies mid-run: just after a slot, while the winner draws.
	time.Sleep(time.Until(first.Add(3*time.Second + 2*time.Millisecond)))
	procs[0].cmd.Process.Signal(syscall.SIGKILL)
	// bravo freezes for 2.5s, longer than the 1s lease, then goes on.
	time.Sleep(time.Until(first.Add(5*time.Second + 2*time.Millisecond)))
	procs[1].cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	procs[1].cmd.Process.Signal(syscall.SIGCONT)

	time.Sleep(time.Until(last.Add(3 * time.Second))) // runs finish; abandoned runs are settled
	for _, p := range procs[1:] {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs[1:] {
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM; logs:\n%s", p.id, err, p.logs.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not stop within 10s of SIGTERM", p.id)
		}
	}

	ctx := context.Background()
	rdb := srv.Client()
	draws, err := lottery.New(rdb, slot.DefaultKeyPrefix).Draws(ctx)
	if err != nil {
		t.Fatal(err)
	}
	per := map[int64]int{}
	for _, d := range draws {
		per[d.Slot]++
		if per[d.Slot] > 1 {
			t.Errorf("slot %d was drawn twice: %+v", d.Slot, draws)
		}
	}
	slots, _ := slotstore.New(rdb, "slotcron")
	drawn, explained := 0, 0
	for s := first; !s.After(last); s = s.Add(time.Second) {
		rec, ok, err := slots.Record(ctx, lottery.Name, s)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case per[s.Unix()] == 1:
			drawn++
			if !ok || (rec.State != slot.StateDone && rec.State != slot.StateAbandoned) {
				t.Errorf("slot %s has a draw but its record is %+v (found %v)", s.Format(time.TimeOnly), rec, ok)
			}
		case ok && rec.State != slot.StateDone && rec.State != slot.StateRunning && rec.Error != "":
			explained++
			t.Logf("slot %s: no draw; record %s: %s", s.Format(time.TimeOnly), rec.State, rec.Error)
		default:
			t.Errorf("slot %s has no draw and no record that says why: %+v (found %v)", s.Format(time.TimeOnly), rec, ok)
		}
	}
	t.Logf("%d slots: %d drawn, %d without a draw and a record that says why", n, drawn, explained)
	// The kill can cost the slot its victim was running (abandoned); the
	// freeze, the victim's slot and the slots skipped behind its lease until
	// the lease expires (1s TTL): about 3. The others are drawn.
	if drawn < n-4 {
		t.Errorf("only %d of %d slots drawn", drawn, n)
	}

	// worker status prints the records as they are.
	out, err := exec.Command(bin, "status", "-config", config("observer")).CombinedOutput()
	if err != nil {
		t.Fatalf("worker status: %v\n%s", err, out)
	}
	recs, err := slots.Records(ctx, lottery.Name, 10)
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^  (\S+Z)\s+(scheduled|manual \S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)`).FindAllStringSubmatch(string(out), -1)
	if len(rows) != len(recs) || len(recs) == 0 {
		t.Fatalf("status printed %d rows for %d records:\n%s", len(rows), len(recs), out)
	}
	for i, r := range recs {
		want := []string{r.Slot.UTC().Format(time.RFC3339), "scheduled", string(r.State), r.Owner, strconv.Itoa(r.Attempt), strconv.FormatInt(r.Fence, 10)}
		if strings.Join(rows[i][1:], " ") != strings.Join(want, " ") {
			t.Errorf("status row %d = %v, record %v", i, rows[i][1:], want)
		}
	}
}

// lockedBuffer is a buffer that a process writes to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogsAreJSON: with Redis down, run writes only JSON to stderr,
// go-redis's own lines included (a log pipeline parses every line), and an
// operator's command (status) writes the one line that explains the
// failure, which names no internal function, without go-redis's lines.
func TestLogsAreJSON(t *testing.T) {
	bin := buildWorker(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("redis:\n  addrs: [\""+addr+"\"]\nhttp:\n  listen: \"\"\njobs:\n  - name: lottery\n    schedule: \"@hourly\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "status", "-config", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("status succeeded without Redis")
	}
	if got := strings.TrimSpace(stderr.String()); strings.Contains(got, "\n") ||
		!strings.HasPrefix(got, "worker status: Redis (single, "+addr+") does not answer: ") {
		t.Fatalf("status without Redis wrote:\n%s", got)
	}

	run := exec.Command(bin, "run", "-config", path)
	var logs lockedBuffer
	run.Stderr = &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		run.Process.Signal(syscall.SIGTERM)
		run.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `"component":"go-redis"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no line from go-redis within 30s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil || entry.Level == "" || entry.Msg == "" {
			t.Fatalf("run wrote a line that is not a JSON log entry: %q (%v)", line, err)
		}
	}
}

package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSlotLinesAlign: at 3, 5 and 20 replicas, whoever wins, the fence and
// the winners start in the same column on every line.
func TestSlotLinesAlign(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, n := range []int{3, 5, 20} {
		col := columns(n)
		var lines []string
		for _, win := range []int{1, n / 2, n} {
			v := &slotView{winner: fmt.Sprintf("replica-%d", win), fence: 1795459398000454 + int64(win)}
			for i := 1; i <= n; i++ {
				if i != win {
					v.lost = append(v.lost, fmt.Sprintf("replica-%d", i))
				}
			}
			lines = append(lines, slotLine(at, v, "user-0001, ... (10)", col, time.TimeOnly))
		}
		lines = append(lines, slotLine(at, nil, "no draw", col, time.TimeOnly))
		for _, field := range []string{"lost ", "fence ", "winners "} {
			first := strings.Index(lines[0], field)
			for _, l := range lines {
				if strings.Index(l, field) != first {
					t.Errorf("%d replicas: %q is not in the same column:\n%s", n, field, strings.Join(lines, "\n"))
					break
				}
			}
		}
		if n <= 5 && !strings.Contains(lines[0], "replica-2, replica-3") || n > 5 && !strings.Contains(lines[0], "lost 19 replicas") {
			t.Errorf("%d replicas: the losers are not shown as they should be:\n%s", n, lines[0])
		}
	}
}

// TestSlotComplete: a slot's line waits for its winner and the replicas
// that take part; past straggle, for its winner or for that many reports,
// but not while its record is running: a starved winner's draw is not yet
// made, and its line (and the verdict) would call the slot drawn by no one.
func TestSlotComplete(t *testing.T) {
	const n, replicas = 3, 5
	for _, tc := range []struct {
		since   time.Duration
		won     bool
		reports int
		running bool
		want    bool
	}{
		{time.Second, true, 3, false, true},
		{time.Second, true, 2, false, false},
		{time.Second, false, 3, false, false},
		{time.Second, false, 5, true, true}, // every replica has reported
		{straggle + time.Millisecond, true, 1, true, true},
		{straggle + time.Millisecond, false, 3, false, true},  // no winner: missed, say
		{straggle + time.Millisecond, false, 3, true, false},  // its run has not ended
		{straggle + time.Millisecond, false, 2, false, false}, // fewer than n
	} {
		reads := 0
		got := slotComplete(tc.since, tc.won, tc.reports, n, replicas, func() bool { reads++; return tc.running })
		if got != tc.want {
			t.Errorf("%v after the slot, won %v, %d reports, running %v: complete %v, want %v", tc.since, tc.won, tc.reports, tc.running, got, tc.want)
		}
		if reads > 0 && (tc.won || tc.since <= straggle || tc.reports < n) {
			t.Errorf("%v after the slot, won %v, %d reports: read the record, which only a slot past straggle with n reports and no winner needs", tc.since, tc.won, tc.reports)
		}
	}
}

// startKid starts script under sh as the replica id, as the demo starts
// its replicas, its reports sent on reports (nil: a channel nobody reads).
func startKid(t *testing.T, id, script string, reports chan report) *kid {
	t.Helper()
	k, err := newKid(id, exec.Command("sh", "-c", script), reports)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.cmd.Process.Kill() })
	return k
}

// TestStopReplicasReportsABadEnd: a replica that exits with an error (a
// crash; a race report, when race-built, exits 66) is reported, not waited
// for in silence; one that stops well is not.
func TestStopReplicasReportsABadEnd(t *testing.T) {
	kids := []*kid{startKid(t, "replica-1", "cat >/dev/null", nil), startKid(t, "replica-2", "cat >/dev/null; exit 66", nil)}
	errs := stopReplicas(kids)
	if len(errs) != 1 || errs[0].Error() != "replica-2: exit status 66" {
		t.Errorf("stopReplicas: %v, want replica-2's exit status 66 alone", errs)
	}
	if errs := stopReplicas(kids); errs != nil {
		t.Errorf("stopReplicas again: %v, want nothing", errs)
	}
}

// TestStopReplicasKillsOneThatDoesNotStop: a replica still running
// stopWithin after its stdin closed is killed, and reported.
func TestStopReplicasKillsOneThatDoesNotStop(t *testing.T) {
	defer func(d time.Duration) { stopWithin = d }(stopWithin)
	stopWithin = 100 * time.Millisecond
	errs := stopReplicas([]*kid{startKid(t, "replica-1", "exec sleep 600", nil), startKid(t, "replica-2", "exec sleep 600", nil)})
	if len(errs) != 2 || errs[0].Error() != "replica-1 did not stop within 100ms of its stdin's close: killed" ||
		errs[1].Error() != "replica-2 did not stop within 100ms of its stdin's close: killed" {
		t.Errorf("stopReplicas: %v, want both killed", errs)
	}
}

// TestStopReplicasWithReportsUnread: a replica whose reports nobody reads
// any more (the demo has counted its slots) still stops: its reader drops
// them, rather than block, and the replica with it on a full pipe.
func TestStopReplicasWithReportsUnread(t *testing.T) {
	k := startKid(t, "replica-1", `echo '{"event":"ready"}'; echo '{"event":"ready"}'; cat >/dev/null`, make(chan report))
	stopped := make(chan []error)
	go func() { stopped <- stopReplicas([]*kid{k}) }()
	select {
	case errs := <-stopped:
		if errs != nil {
			t.Errorf("stopReplicas: %v", errs)
		}
	case <-time.After(10 * time.Second): // it stops at once; stopWithin is 15s
		t.Fatal("stopReplicas did not return within 10s: the reader is stuck on a report")
	}
}

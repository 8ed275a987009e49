package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestOneStartPerSlot runs 5 replicas of one table (3 jobs at @every 1s) for
// 20 slots and asserts, twice, that each slot started exactly once: from the
// starts the jobs wrote to a list of their own, and from the slot records.
// Each scenario runs in its own bubble (see harness_test.go).
//
// With skewed clocks the replicas fire up to 800ms apart, so with a 1ms job
// the winner has long finished and released its lease when the last replica
// claims: the double run that ShedLock's lockAtLeastFor papers over. A slot's
// record outlives its run, so the late claim loses.
func TestOneStartPerSlot(t *testing.T) {
	skews := []time.Duration{-400 * time.Millisecond, -200 * time.Millisecond, 0, 200 * time.Millisecond, 400 * time.Millisecond}
	tests := []struct {
		name   string
		skewed bool
		hold   time.Duration
	}{
		{"aligned clocks", false, 50 * time.Millisecond},
		{"clocks skewed -400ms..+400ms", true, 50 * time.Millisecond},
		{"skewed clocks and a 1ms job", true, time.Millisecond},
	}
	const n = 20
	names := []string{"alpha", "beta", "gamma"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, e *harness) {
				first := nextSecond(1500 * time.Millisecond)
				effects := "effects"
				var table []scheduler.Job
				fns := map[string]jobs.Func{}
				for _, name := range names {
					table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s", LeaseTTL: 2 * time.Second})
					fns[name] = recorder(e.rdb, effects, tt.hold)
				}
				for r, skew := range skews {
					var ro replicaOpts
					if tt.skewed {
						ro.offset = skew
					}
					e.startWith(fmt.Sprintf("r%d", r), ro, registry(t, fns), table)
				}
				sleepUntil(first.Add(n*time.Second + 1500*time.Millisecond))
				oneStartPerSlot(t, e, effects, names, first, n)
			})
		})
	}
}

// oneStartPerSlot asserts that each of the n slots from first of each job
// started exactly once, from the starts the jobs wrote and from the records,
// and that fences rise.
func oneStartPerSlot(t *testing.T, e *harness, effects string, names []string, first time.Time, n int64) {
	t.Helper()
	count := map[string]map[int64]int{}
	for _, s := range e.starts(effects) {
		if count[s.job] == nil {
			count[s.job] = map[int64]int{}
		}
		count[s.job][s.slot]++
	}
	for _, job := range names {
		var lastFence int64
		for at := first.Unix(); at < first.Unix()+n; at++ {
			if c := count[job][at]; c != 1 {
				t.Errorf("%s@%d started %d times, want 1", job, at, c)
			}
			rec, ok := e.record(job, at)
			if !ok || rec.State != slot.StateDone || rec.Attempt != 1 {
				t.Errorf("%s@%d record %+v (found %v), want done at attempt 1", job, at, rec, ok)
				continue
			}
			if rec.Fence <= lastFence {
				t.Errorf("%s@%d fence %d after %d", job, at, rec.Fence, lastFence)
			}
			lastFence = rec.Fence
		}
	}
}

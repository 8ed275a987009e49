package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
)

// TestOneStartPerSlot runs 5 replicas of one table (3 jobs at @every 1s) for
// 20 slots and asserts, twice, that each slot started exactly once: from the
// starts the jobs wrote to a list of their own, and from the slot records.
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
	// The scenarios run side by side, each on its own Redis, so that the
	// test takes 20 slots of wall time, not 60.
	const n = 20
	names := []string{"alpha", "beta", "gamma"}
	envs := make([]*env, len(tests))
	first := nextSecond(1500 * time.Millisecond)
	for i, tt := range tests {
		e := newEnv(t)
		envs[i] = e
		effects := e.srv.Key("effects")
		var table []scheduler.Job
		fns := map[string]jobs.Func{}
		for _, name := range names {
			table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s", LeaseTTL: 2 * time.Second})
			fns[name] = recorder(e.rdb, effects, tt.hold)
		}
		for r, skew := range skews {
			var opts []scheduler.Option
			if tt.skewed {
				opts = append(opts, scheduler.WithClock(offsetClock{skew}))
			}
			e.start(fmt.Sprintf("r%d", r), "", registry(t, fns), table, opts...)
		}
	}
	sleepUntil(first.Add(n*time.Second + 1500*time.Millisecond))

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envs[i]
			count := map[string]map[int64]int{}
			for _, s := range e.starts(e.srv.Key("effects")) {
				if count[s.job] == nil {
					count[s.job] = map[int64]int{}
				}
				count[s.job][s.slot]++
			}
			for _, job := range names {
				var lastFence int64
				for slot := first.Unix(); slot < first.Unix()+n; slot++ {
					if c := count[job][slot]; c != 1 {
						t.Errorf("%s@%d started %d times, want 1", job, slot, c)
					}
					rec, ok := e.record(job, slot)
					if !ok || rec.State != locking.StateDone || rec.Attempt != 1 {
						t.Errorf("%s@%d record %+v (found %v), want done at attempt 1", job, slot, rec, ok)
						continue
					}
					if rec.Fence <= lastFence {
						t.Errorf("%s@%d fence %d after %d", job, slot, rec.Fence, lastFence)
					}
					lastFence = rec.Fence
				}
			}
		})
	}
}

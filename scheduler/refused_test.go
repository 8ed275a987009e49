package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// refuseJob is a store that refuses, as invalid, any batch with a claim of
// job: what a bug in a claim's making would cause (the store checks every
// claim before it sends any).
type refuseJob struct {
	*slotstore.Store
	job string
}

func (r refuseJob) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	for i, c := range claims {
		if c.Job == r.job {
			return nil, fmt.Errorf("refuseJob: Claim %d (%s): invalid", i, c.Job)
		}
	}
	return r.Store.Claim(ctx, claims)
}

// TestARefusedClaimDoesNotTakeItsBatchDown: one claim that the store refuses
// as invalid makes the store refuse its whole batch. The other jobs due at
// the same instant must still run each slot, once; the refused job runs
// nothing, and a Trigger of it returns the store's error rather than
// waiting for an answer that never comes.
func TestARefusedClaimDoesNotTakeItsBatchDown(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		fns := map[string]jobs.Func{}
		var table []scheduler.Job
		for _, name := range []string{"a", "b", "bad", "c"} {
			fns[name] = recorder(h.rdb, "starts", 0)
			table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s"})
		}
		r := h.startWith("r1", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { return refuseJob{s, "bad"} }},
			registry(t, fns), table)
		time.Sleep(5*time.Second + 500*time.Millisecond)
		synctest.Wait()
		per := map[string]int{}
		for _, s := range h.starts("starts") {
			per[s.job]++
		}
		for _, name := range []string{"a", "b", "c"} {
			if per[name] < 5 {
				t.Errorf("job %s ran %d slots in 5 s, want 5 or more", name, per[name])
			}
		}
		if per["bad"] != 0 {
			t.Errorf("the refused job ran %d times", per["bad"])
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := r.s.Trigger(ctx, "bad", slot.Manual{})
		if err == nil || !strings.Contains(err.Error(), "refuseJob") {
			t.Fatalf("Trigger of the refused job: %v, want the store's error", err)
		}
	})
}

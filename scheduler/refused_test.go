package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

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

// renewAfterFinish holds its first renewal until the run it renews has
// finished: the renewal then reaches Redis after the run's finish.
type renewAfterFinish struct {
	*slotstore.Store
	once               *sync.Once
	renewing, finished chan struct{}
}

func (r renewAfterFinish) Renew(ctx context.Context, leases []slot.Lease) []error {
	first := false
	r.once.Do(func() { first = true; close(r.renewing) })
	if first {
		<-r.finished
	}
	return r.Store.Renew(ctx, leases)
}

func (r renewAfterFinish) Finish(ctx context.Context, reqs []slot.FinishRequest) []error {
	errs := r.Store.Finish(ctx, reqs)
	select {
	case <-r.finished:
	default:
		close(r.finished)
	}
	return errs
}

// TestARenewalAfterTheFinishIsNoLoss: a renewal in flight when its run
// finishes reaches Redis after the finish, and is refused: the record is
// no longer running. That is not a lost lease, and must not be counted as
// one (slotcron.lease_renewals{result="lost"} is what operators alert on).
func TestARenewalAfterTheFinishIsNoLoss(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		wrap := renewAfterFinish{once: &sync.Once{}, renewing: make(chan struct{}), finished: make(chan struct{})}
		fns := map[string]jobs.Func{"j": func(ctx context.Context, run jobs.Run) error {
			<-wrap.renewing // returns while its renewal is in flight
			return nil
		}}
		metrics := sdkmetric.NewManualReader()
		r := h.startWith("r1", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { wrap.Store = s; return wrap }},
			registry(t, fns), []scheduler.Job{{Name: "j", Schedule: "0 0 12 * * *", LeaseTTL: time.Second}},
			scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
		synctest.Wait()
		if _, err := r.s.Trigger(context.Background(), "j", slot.Manual{}); err != nil {
			t.Fatal(err)
		}
		<-wrap.finished
		time.Sleep(time.Second)
		synctest.Wait()
		if results := counterBy(t, metrics, "slotcron.lease_renewals", "result"); results["lost"] != 0 {
			t.Fatalf("lease renewals by result: %v; want no loss", results)
		}
	})
}

// TestARenewalThatFindsTheLeaseGoneCountsALoss: a run's renewal finds its
// lease no longer holds its token (here deleted, as another run taking the
// job would replace it). The run's context ends with ErrLeaseLost, and
// slotcron.lease_renewals{result="lost"} counts it once, however soon the
// run, woken by the loss, leaves the renewer.
func TestARenewalThatFindsTheLeaseGoneCountsALoss(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		started, lost := make(chan struct{}), make(chan error, 1)
		fns := map[string]jobs.Func{"j": func(ctx context.Context, run jobs.Run) error {
			close(started)
			<-ctx.Done()
			lost <- context.Cause(ctx)
			return ctx.Err()
		}}
		metrics := sdkmetric.NewManualReader()
		r := h.start("r1", registry(t, fns), []scheduler.Job{{Name: "j", Schedule: "0 0 12 * * *", LeaseTTL: 3 * time.Second}},
			scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
		synctest.Wait()
		if _, err := r.s.Trigger(context.Background(), "j", slot.Manual{}); err != nil {
			t.Fatal(err)
		}
		<-started
		if err := h.rdb.HDel(context.Background(), h.prefix+":{j}:state", "lease").Err(); err != nil {
			t.Fatal(err)
		}
		var cause error
		select {
		case cause = <-lost: // at the next renewal, within a TTL/3
		case <-time.After(3 * time.Second): // the bubble's clock
			t.Fatal("the run's context did not end within a lease TTL of its lease's deletion")
		}
		if !errors.Is(cause, slot.ErrLeaseLost) {
			t.Fatalf("the run's context ended with %v, want ErrLeaseLost", cause)
		}
		synctest.Wait()
		if results := counterBy(t, metrics, "slotcron.lease_renewals", "result"); results["lost"] != 1 {
			t.Fatalf("lease renewals by result: %v; want lost 1", results)
		}
	})
}

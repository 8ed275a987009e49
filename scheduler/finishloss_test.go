package scheduler_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// TestALeaseLostInRedisThatOnlyTheFinishSeesIsReported: Redis lets a run's
// lease lapse while the run's replica still holds it on its own clock (a
// failover to a replica that missed the last renewals, or Redis's clock
// stepped ahead), and before the run's next renewal another replica acts on
// it: a takeover records the slot abandoned, or another run takes the job.
// The job returns first. Only the finish sees what happened; it used to say
// it with a WARN (taken over) or not at all (another run took the job), and
// the lease's loss went without an ERROR, a lease_lost event or the metric.
// Found by review.
func TestALeaseLostInRedisThatOnlyTheFinishSeesIsReported(t *testing.T) {
	for _, then := range []string{"taken over", "another run took the job"} {
		t.Run(then, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				ctx := context.Background()
				at := nextSecond(0).Add(10 * time.Second).Truncate(10 * time.Second)
				started, release := make(chan struct{}), make(chan struct{})
				fn := func(ctx context.Context, run jobs.Run) error {
					if !run.Slot.Equal(at) || run.Manual != nil {
						return nil
					}
					close(started)
					<-release
					return nil
				}
				events := &eventLog{}
				var logs lines
				metrics := sdkmetric.NewManualReader()
				table := []scheduler.Job{{Name: "j", Schedule: "@every 10s", LeaseTTL: 3 * time.Second}}
				h.start("r1", registry(t, map[string]jobs.Func{"j": fn}), table, events.option(),
					scheduler.WithLogger(slog.New(slog.NewTextHandler(io.MultiWriter(&logs, h.log), &slog.HandlerOptions{Level: slog.LevelWarn}))),
					scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
				<-started
				// Between two of r1's renewals (its renewer ticks every
				// second, TTL/3, from its start: on the bubble's clock, on
				// the whole second), Redis now holds r1's lease as lapsed,
				// as a new master that missed its renewals would.
				sleepUntil(at.Add(400 * time.Millisecond))
				key := h.prefix + ":{j}:state"
				w := strings.SplitN(h.rdb.HGet(ctx, key, "lease").Val(), " ", 4)
				if len(w) != 4 {
					t.Fatalf("the job's lease: %q", w)
				}
				w[2] = "1"
				h.rdb.HSet(ctx, key, "lease", strings.Join(w, " "))
				other := slot.Claim{Kind: slot.ClaimTakeover, Job: "j", Slot: at, Replica: "r2", LeaseTTL: 3 * time.Second,
					Retention: 24 * time.Hour, MaxAttempts: 1}
				want := slot.OutcomeAbandoned
				if then == "another run took the job" {
					other = slot.Claim{Kind: slot.ClaimManual, Job: "j", Slot: at, Replica: "r2", LeaseTTL: 3 * time.Second,
						Retention: 24 * time.Hour, Manual: &slot.Manual{ID: "m1", By: "ops", Note: "now"}}
					want = slot.OutcomeWon
				}
				res, err := h.store.Claim(ctx, []slot.Claim{other})
				if err != nil || res[0].Err != nil || res[0].Outcome != want {
					t.Fatalf("r2's claim: %+v, %v; want %v", res, err, want)
				}
				sleepUntil(at.Add(500 * time.Millisecond)) // well within r1's lease, on its clock, and before its next renewal
				close(release)
				time.Sleep(2 * time.Second)
				if n := len(events.of(t, scheduler.EventLeaseLost)); n != 1 {
					t.Errorf("%s under r1's running job: %d lease_lost events, want 1", then, n)
				}
				if n := counter(t, metrics, "slotcron.lease_lost"); n != 1 {
					t.Errorf("slotcron.lease_lost = %d, want 1", n)
				}
				if !slices.ContainsFunc(logs.all(), func(l string) bool {
					return strings.Contains(l, "level=ERROR") && strings.Contains(l, "lease lost")
				}) {
					t.Errorf("no ERROR says the lease was lost")
				}
			})
		})
	}
}

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
)

func secs(base time.Time, offsets ...int) []time.Time {
	var out []time.Time
	for _, o := range offsets {
		out = append(out, base.Add(time.Duration(o)*time.Second))
	}
	return out
}

func TestPlanStartup(t *testing.T) {
	every, _ := ParseSchedule("@every 10s")
	start := utc("2026-11-22T10:00:05Z") // slots at :50 :40 ... before it
	base := utc("2026-11-22T10:00:00Z")
	job := func(c Catchup, window time.Duration) Job {
		return Job{Name: "j", Schedule: "@every 10s", Catchup: c, CatchupWindow: window}.WithDefaults(time.Second)
	}
	tests := []struct {
		name      string
		job       Job
		last      time.Time
		maxSkew   time.Duration
		run, miss []time.Time
		check     []time.Time
		live      time.Time
	}{
		{"first deployment: nothing to catch up", job(CatchupAll, time.Hour), time.Time{}, 2 * time.Second,
			nil, nil, nil, base.Add(10 * time.Second)},
		{"none records every missed slot", job(CatchupNone, time.Hour), base.Add(-50 * time.Second), 2 * time.Second,
			nil, secs(base, -40, -30, -20, -10, 0), secs(base, -50), base.Add(10 * time.Second)},
		{"last runs the latest, records the rest", job(CatchupLast, time.Hour), base.Add(-50 * time.Second), 2 * time.Second,
			secs(base, 0), secs(base, -40, -30, -20, -10), secs(base, -50), base.Add(10 * time.Second)},
		{"all runs each, oldest first", job(CatchupAll, time.Hour), base.Add(-50 * time.Second), 2 * time.Second,
			secs(base, -40, -30, -20, -10, 0), nil, secs(base, -50), base.Add(10 * time.Second)},
		{"the window bounds what runs; older slots are missed", job(CatchupAll, 25*time.Second), base.Add(-50 * time.Second), 2 * time.Second,
			secs(base, -10, 0), secs(base, -40, -30, -20), nil, base.Add(10 * time.Second)},
		{"slots within max_skew of the start are live", job(CatchupLast, time.Hour), base.Add(-50 * time.Second), 6 * time.Second,
			secs(base, -10), secs(base, -40, -30, -20), secs(base, -50), base},
		{"nothing missed", job(CatchupLast, time.Hour), base, 2 * time.Second,
			nil, nil, secs(base, 0), base.Add(10 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planStartup(tt.job, every, slot.JobState{Last: tt.last}, start, tt.maxSkew, olderLimit(1))
			if !slices.EqualFunc(p.run, tt.run, time.Time.Equal) || !slices.EqualFunc(p.miss, tt.miss, time.Time.Equal) {
				t.Fatalf("run %v miss %v\nwant run %v miss %v", p.run, p.miss, tt.run, tt.miss)
			}
			if !slices.EqualFunc(p.check, tt.check, time.Time.Equal) || !p.live.Equal(tt.live) {
				t.Fatalf("check %v live %v, want %v %v", p.check, p.live, tt.check, tt.live)
			}
		})
	}
}

// TestPlanStartupOlderThanTheWindow: the slots after the job's last record
// and older than the catch-up window are recorded missed, first in the
// backlog (old counts them), back to the retention plus max_skew before the
// start; with the window's, at most MaxCatchupSlots, the latest. What is
// left out is counted, without a time held for each.
func TestPlanStartupOlderThanTheWindow(t *testing.T) {
	every, _ := ParseSchedule("@every 1s")
	cron, _ := ParseSchedule("* * * * * *") // the same slots, stepped through one at a time
	start := utc("2026-11-22T10:00:00.5Z")
	tests := []struct {
		name                     string
		window, retention        time.Duration
		down                     time.Duration // the last record, before start
		old, dropped, expired    int
		expiredMore              bool
		firstMissed, firstWindow time.Time
	}{
		{"within the retention", time.Hour, 3 * time.Hour, 2 * time.Hour,
			3600, 0, 0, false, start.Add(-2*time.Hour + 500*time.Millisecond), start.Add(-time.Hour + 500*time.Millisecond)},
		// Slots up to start - retention - max_skew (2s) are not recorded.
		{"past the retention", time.Hour, 3 * time.Hour, 5 * time.Hour,
			2*3600 + 2, 0, 2*3600 - 2, false, start.Add(-3*time.Hour - 1500*time.Millisecond), start.Add(-time.Hour + 500*time.Millisecond)},
		// The window holds 172,798 slots (the last 2 s are live): 27,202
		// more fit, the latest of the 259,200 older ones.
		{"over MaxCatchupSlots", 48 * time.Hour, 7 * 24 * time.Hour, 5 * 24 * time.Hour,
			MaxCatchupSlots - 172_798, 259_200 - (MaxCatchupSlots - 172_798), 0, false,
			start.Add(-48*time.Hour - (MaxCatchupSlots-172_798-1)*time.Second - 500*time.Millisecond), start.Add(-48*time.Hour + 500*time.Millisecond)},
		{"silent for years", time.Hour, 3 * time.Hour, 5 * 365 * 24 * time.Hour,
			2*3600 + 2, 0, maxCounted, true, start.Add(-3*time.Hour - 1500*time.Millisecond), start.Add(-time.Hour + 500*time.Millisecond)},
	}
	for _, tt := range tests {
		for _, sched := range []Schedule{every, cron} {
			name := fmt.Sprintf("%s/%T", tt.name, sched)
			if _, ok := sched.(everySchedule); !ok && tt.expiredMore {
				continue // 157 million slots, one at a time: the count stops at maxCounted, as tested with every
			}
			t.Run(name, func(t *testing.T) {
				job := Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupNone, CatchupWindow: tt.window, Retention: tt.retention}.WithDefaults(time.Second)
				last := start.Add(-tt.down).Truncate(time.Second)
				p := planStartup(job, sched, slot.JobState{Last: last}, start, 2*time.Second, olderLimit(1))
				if p.old != tt.old || p.dropped != tt.dropped || p.expired != tt.expired || p.expiredMore != tt.expiredMore {
					t.Fatalf("old %d dropped %d expired %d (more %v); want %d %d %d (%v)", p.old, p.dropped, p.expired, p.expiredMore,
						tt.old, tt.dropped, tt.expired, tt.expiredMore)
				}
				if len(p.miss) < p.old+1 || !p.miss[0].Equal(tt.firstMissed) || !p.miss[p.old].Equal(tt.firstWindow) {
					t.Fatalf("missed %d slots from %v, the window's from %v; want from %v and %v", len(p.miss), p.miss[0], p.miss[p.old], tt.firstMissed, tt.firstWindow)
				}
				for i := 1; i < len(p.miss); i++ {
					if !p.miss[i].Equal(p.miss[i-1].Add(time.Second)) {
						t.Fatalf("missed slot %d is %v, after %v", i, p.miss[i], p.miss[i-1])
					}
				}
				if len(p.miss) > MaxCatchupSlots {
					t.Fatalf("%d slots to record", len(p.miss))
				}
			})
		}
	}
}

func TestClaimRequests(t *testing.T) {
	at := utc("2026-11-22T12:00:00Z")
	skip := Job{Name: "lottery", Schedule: "0 0 12 * * *"}.WithDefaults(15 * time.Second)
	allow := Job{Name: "lottery", Schedule: "0 0 12 * * *", Overlap: OverlapAllow, MisfireGrace: 5 * time.Second,
		OnOwnerLost: OwnerLostRetry, MaxAttempts: 4}.WithDefaults(15 * time.Second)

	c := claim(slot.ClaimLive, skip, at, "r1")
	if !c.Deadline.Equal(at.Add(time.Minute)) || c.AllowOverlap || c.Retry || c.LeaseTTL != 15*time.Second {
		t.Fatalf("live claim with defaults: %+v", c)
	}
	// A slot older than its misfire grace is recorded missed, never started late.
	c = claim(slot.ClaimLive, allow, at, "r1")
	if !c.Deadline.Equal(at.Add(5*time.Second)) || !c.AllowOverlap || !c.Retry || c.MaxAttempts != 4 {
		t.Fatalf("live claim: %+v", c)
	}
	if m := claim(slot.ClaimMiss, skip, at, "r1"); !strings.Contains(m.Reason, "catchup: last") {
		t.Fatalf("miss reason %q", m.Reason)
	}
	if m := claim(slot.ClaimCatchup, skip, at, "r1"); !m.Deadline.IsZero() {
		t.Fatalf("catch-up claims have no deadline: %+v", m)
	}
}

func TestJobValidation(t *testing.T) {
	tests := []struct {
		name  string
		job   Job
		field string
		want  string
	}{
		{"bad name", Job{Name: "a b", Schedule: "@daily"}, "name", "invalid name"},
		{"bad schedule", Job{Name: "j", Schedule: "* * * *"}, "schedule", "expected 5 or 6 fields, found 4"},
		{"negative timeout", Job{Name: "j", Schedule: "@daily", Timeout: -time.Second}, "timeout", "must be >= 0"},
		{"bad overlap", Job{Name: "j", Schedule: "@daily", Overlap: "queue"}, "overlap", `got "queue"`},
		{"bad catchup", Job{Name: "j", Schedule: "@daily", Catchup: "some"}, "catchup", `got "some"`},
		{"bad policy", Job{Name: "j", Schedule: "@daily", OnOwnerLost: "panic"}, "on_owner_lost", `got "panic"`},
		{"attempts without retry", Job{Name: "j", Schedule: "@daily", MaxAttempts: 5}, "max_attempts", "only with on_owner_lost: retry"},
		{"short lease", Job{Name: "j", Schedule: "@daily", LeaseTTL: 10 * time.Millisecond}, "lease_ttl", "at least 100ms"},
		{"retention under grace", Job{Name: "j", Schedule: "@daily", Retention: 30 * time.Second}, "retention", "misfire_grace + max_skew"},
		{"retention under window", Job{Name: "j", Schedule: "@daily", Retention: 30 * time.Minute}, "retention", "catchup_window + max_skew"},
		{"a grace whose sum overflows", Job{Name: "j", Schedule: "@daily", MisfireGrace: math.MaxInt64}, "retention", "misfire_grace + max_skew"},
		{"a window whose sum overflows", Job{Name: "j", Schedule: "@daily", CatchupWindow: math.MaxInt64 - time.Second, Retention: math.MaxInt64 - time.Second},
			"retention", "catchup_window + max_skew"},
		{"a window too large to record", Job{Name: "j", Schedule: "@every 1s", CatchupWindow: 72 * time.Hour, Retention: 73 * time.Hour},
			"catchup_window", `72h0m0s of "@every 1s" holds more than 200000 slots`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := tt.job.WithDefaults(time.Second).Validate(2 * time.Second)
			if len(errs) != 1 || errs[0].Field != tt.field || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("errors %v, want one on %s containing %q", errs, tt.field, tt.want)
			}
		})
	}
	// Every problem at once.
	bad := Job{Name: "", Schedule: "nope", Overlap: "x", Catchup: "y"}.WithDefaults(time.Second)
	if errs := bad.Validate(time.Second); len(errs) != 4 {
		t.Fatalf("%d errors, want 4: %v", len(errs), errs)
	}
}

func TestNewReportsEverything(t *testing.T) {
	reg := jobs.NewRegistry()
	reg.Register("lottery", func(ctx context.Context, run jobs.Run) error { return nil })
	reg.Register("report", func(ctx context.Context, run jobs.Run) error { return nil })
	_, err := New(nopClaimer{}, reg,
		WithJobs(Job{Name: "lotery", Schedule: "@daily"}, Job{Name: "report", Schedule: "* *"}, Job{Name: "lottery", Schedule: "@daily"}, Job{Name: "lottery", Schedule: "@daily"}),
		WithLeaseTTL(time.Millisecond), WithSkewLimits(time.Second, time.Millisecond))
	if err == nil {
		t.Fatal("New accepted a broken table")
	}
	for _, want := range []string{
		`job "lotery": no Func is registered under this name; registered: [lottery report]`,
		`job "report": schedule: expected 5 or 6 fields, found 2`,
		`job "lottery": listed twice`,
		"WithLeaseTTL: ttl must be at least 100ms",
		"WithSkewLimits: need 0 < warn <= max",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := New(nopClaimer{}, reg); err == nil || !strings.Contains(err.Error(), "no jobs") {
		t.Fatalf("New without jobs: %v", err)
	}
}

func TestRunTwice(t *testing.T) {
	reg := jobs.NewRegistry()
	reg.Register("j", func(ctx context.Context, run jobs.Run) error { return nil })
	s, err := New(nopClaimer{}, reg, WithJobs(Job{Name: "j", Schedule: "@daily"}), WithShutdownGrace(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run on a cancelled context: %v", err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
}

// nopClaimer answers nothing useful; it lets New and Run be tested without Redis.
type nopClaimer struct{}

func (nopClaimer) Prepare(context.Context) error { return nil }
func (nopClaimer) Claim(context.Context, []slot.Claim) ([]slot.Result, error) {
	return nil, errors.New("nop")
}
func (nopClaimer) Renew(_ context.Context, l []slot.Lease) []error {
	return make([]error, len(l))
}
func (nopClaimer) Finish(_ context.Context, r []slot.FinishRequest) []error {
	return make([]error, len(r))
}
func (nopClaimer) Leave(context.Context, slot.Replica) error { return nil }
func (nopClaimer) Registry(context.Context, time.Duration) (slot.Registry, error) {
	return slot.Registry{Now: time.Now()}, nil
}
func (nopClaimer) Peek(context.Context, []slot.Claim) ([]slot.Record, error) { return nil, nil }
func (nopClaimer) Missing(context.Context, []slot.Ref) ([]int, error)        { return nil, nil }
func (nopClaimer) Running(context.Context, []string) (map[string]slot.JobState, error) {
	return nil, nil
}
func (nopClaimer) Heartbeat(_ context.Context, me slot.Replica, _ time.Duration) (slot.Registry, error) {
	return slot.Registry{Now: time.Now(), Replicas: []slot.Replica{me}}, nil
}
func (nopClaimer) JobStates(context.Context, []string) (map[string]slot.JobState, error) {
	return nil, nil
}
func (nopClaimer) Probe(context.Context) (slot.Probe, error) {
	return slot.Probe{Now: time.Now(), Epoch: "nop"}, nil
}

// TestPlanStartupOlderSlotsShareATableBudget: the slots older than the
// catch-up window that a start records are bounded across the table
// (MaxOlderSlots), not only per job: in a table of 1,000 jobs each records
// its latest 1,000, and counts the rest. Before, every job recorded up to
// MaxCatchupSlots: 10,000 jobs due every minute, down for a day, would have
// written 14 million records.
func TestPlanStartupOlderSlotsShareATableBudget(t *testing.T) {
	every, err := ParseSchedule("@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 10, 12, 0, 0, 500_000_000, time.UTC)
	job := Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupNone, CatchupWindow: time.Hour, Retention: 24 * time.Hour}.WithDefaults(time.Second)
	last := start.Add(-5 * time.Hour).Truncate(time.Second)
	limit := olderLimit(1_000)
	if limit != 1_000 {
		t.Fatalf("olderLimit(1000) = %d; want 1,000", limit)
	}
	p := planStartup(job, every, slot.JobState{Last: last}, start, 2*time.Second, limit)
	older := 4 * 3600 // (last, start - 1h]: one a second
	if p.old != limit || p.dropped != older-limit || p.expired != 0 {
		t.Fatalf("old %d, dropped %d, expired %d; want %d, %d, 0", p.old, p.dropped, p.expired, limit, older-limit)
	}
	windowFirst := start.Add(-time.Hour + 500*time.Millisecond)
	if !p.miss[p.old].Equal(windowFirst) || !p.miss[p.old-1].Equal(windowFirst.Add(-time.Second)) || !p.miss[0].Equal(windowFirst.Add(-time.Duration(limit)*time.Second)) {
		t.Fatalf("kept older slots %v to %v, the window's from %v; want the latest %d before %v", p.miss[0], p.miss[p.old-1], p.miss[p.old], limit, windowFirst)
	}
}

// BenchmarkPlanStartupOlder: planning one job of a table of 10,000, due
// every second, after all replicas were down for 25 hours (the default
// retention of 24h): it records its latest 100 slots older than the window.
//
//	go test -run '^$' -bench PlanStartupOlder -count 5 ./scheduler
func BenchmarkPlanStartupOlder(b *testing.B) {
	every, err := ParseSchedule("@every 1s")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 3, 10, 12, 0, 0, 500_000_000, time.UTC)
	job := Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupNone}.WithDefaults(time.Second)
	st := slot.JobState{Last: start.Add(-25 * time.Hour).Truncate(time.Second)}
	for b.Loop() {
		if p := planStartup(job, every, st, start, 2*time.Second, olderLimit(10_000)); p.old != 100 {
			b.Fatalf("%d older slots recorded; want 100", p.old)
		}
	}
}

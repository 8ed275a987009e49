package locking_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/locking"
)

// pipelineCounter counts round trips: each single command and each pipeline
// (go-redis sends a pipeline in one write and reads all replies) is one.
type pipelineCounter struct{ n atomic.Int64 }

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

func newSlots(t *testing.T) (*redistest.Server, *redis.Client, *locking.Slots) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	s, err := locking.NewSlots(rdb, srv.Key("sc"))
	if err != nil {
		t.Fatal(err)
	}
	return srv, rdb, s
}

func live(job string, slot time.Time, replica string) locking.SlotClaim {
	return locking.SlotClaim{Kind: locking.ClaimLive, Job: job, Slot: slot, Replica: replica,
		LeaseTTL: 5 * time.Second, Retention: time.Hour, Deadline: time.Now().Add(time.Minute)}
}

func claimOne(t *testing.T, s *locking.Slots, c locking.SlotClaim) locking.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), []locking.SlotClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Fatalf("claim: %v", res[0].Err)
	}
	return res[0]
}

func TestSlotOneWinnerAmongReplicas(t *testing.T) {
	_, _, s := newSlots(t)
	slot := time.Unix(1_700_000_000, 0)
	const replicas = 10
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = map[string]locking.ClaimResult{}
		start   = make(chan struct{})
	)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("r%d", i)
			res, err := s.Claim(context.Background(), []locking.SlotClaim{live("draw", slot, name)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res = []locking.ClaimResult{{Err: err}}
			}
			results[name] = res[0]
		}()
	}
	close(start)
	wg.Wait()
	var winner string
	for name, r := range results {
		if r.Err != nil {
			t.Fatalf("%s: %v", name, r.Err)
		}
		if r.Outcome == locking.OutcomeWon {
			if winner != "" {
				t.Fatalf("two winners: %s and %s", winner, name)
			}
			winner = name
		}
	}
	if winner == "" {
		t.Fatal("no winner")
	}
	for name, r := range results {
		if name == winner {
			if r.Lease == nil || r.Fence != 1 || r.Attempt != 1 {
				t.Fatalf("winner's result %+v", r)
			}
			continue
		}
		if r.Outcome != locking.OutcomeLost || r.Holder != winner || r.State != locking.StateRunning {
			t.Fatalf("%s: %+v, want lost to %s while running", name, r, winner)
		}
	}
}

// TestSlotFinishedStaysClosed is the fast-job double run: the winner finishes
// in a millisecond, a replica whose clock is behind claims the same slot
// afterwards, and must lose.
func TestSlotFinishedStaysClosed(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	slot := time.Unix(1_700_000_060, 0)
	won := claimOne(t, s, live("fast", slot, "early"))
	if won.Outcome != locking.OutcomeWon {
		t.Fatalf("%+v", won)
	}
	if err := finish(s, won.Lease, locking.StateRunning, ""); err == nil || errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("finish with a state that is not final: %v, want a usage error", err)
	}
	if won.Lease.Context().Err() != nil {
		t.Fatal("a refused finish ended the lease")
	}
	if err := finish(s, won.Lease, locking.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if won.Lease.Context().Err() == nil {
		t.Fatal("the lease is still live after Finish")
	}
	late := claimOne(t, s, live("fast", slot, "late"))
	if late.Outcome != locking.OutcomeLost || late.State != locking.StateDone || late.Holder != "early" {
		t.Fatalf("late claim of a finished slot: %+v", late)
	}
	rec, ok, err := s.Record(ctx, "fast", slot)
	if err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if rec.State != locking.StateDone || rec.Owner != "early" || rec.Fence != 1 || rec.Finished.IsZero() {
		t.Fatalf("record %+v", rec)
	}
	// The lease went with the finish; the record stays for the retention.
	ttl := rdb.PTTL(ctx, s.Prefix()+":{fast}:slot:1700000060").Val()
	if ttl < 59*time.Minute {
		t.Fatalf("record TTL %v, want the 1h retention", ttl)
	}
	// A second finish is refused (the run is over) and changes nothing.
	if err := finish(s, won.Lease, locking.StateFailed, "again"); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("second finish with another state: %v", err)
	}
}

func TestSlotMisfireRecordedOnRedisClock(t *testing.T) {
	_, _, s := newSlots(t)
	slot := time.Now().Add(-2 * time.Minute).Truncate(time.Second)
	c := live("late", slot, "r1")
	c.Deadline = slot.Add(time.Minute) // grace 1m, already over on Redis's clock
	res := claimOne(t, s, c)
	if res.Outcome != locking.OutcomeMissed || res.Late < 2*time.Minute-time.Second {
		t.Fatalf("%+v, want missed about 2m late", res)
	}
	rec, _, _ := s.Record(context.Background(), "late", slot)
	if rec.State != locking.StateMissed || rec.Owner != "r1" || rec.Error == "" {
		t.Fatalf("record %+v", rec)
	}
	again := claimOne(t, s, live("late", slot, "r2"))
	if again.Outcome != locking.OutcomeLost || again.State != locking.StateMissed {
		t.Fatalf("claim of a missed slot: %+v", again)
	}
}

func TestSlotOverlap(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	s1, s2, s3 := time.Unix(1_700_000_100, 0), time.Unix(1_700_000_101, 0), time.Unix(1_700_000_102, 0)
	const holder = "pod 7 eu:1" // a replica ID may hold spaces and colons
	first := claimOne(t, s, live("long", s1, holder))
	if first.Outcome != locking.OutcomeWon {
		t.Fatal(first)
	}
	// Catch-up mode: busy, nothing recorded.
	cu := live("long", s2, "r2")
	cu.Kind = locking.ClaimCatchup
	if r := claimOne(t, s, cu); r.Outcome != locking.OutcomeBusy || r.Holder != holder || r.Wait <= 0 || !r.HolderSlot.Equal(s1) {
		t.Fatalf("catch-up under a running job: %+v", r)
	}
	if _, ok, _ := s.Record(ctx, "long", s2); ok {
		t.Fatal("busy catch-up left a record")
	}
	if h, hs, ttl, err := s.Holder(ctx, "long"); err != nil || h != holder || !hs.Equal(s1) || ttl <= 0 {
		t.Fatalf("Holder = %q %v %v %v", h, hs, ttl, err)
	}
	// Live: recorded skipped, naming the run that holds the job.
	if r := claimOne(t, s, live("long", s2, "r2")); r.Outcome != locking.OutcomeSkipped || r.Holder != holder ||
		!r.HolderSlot.Equal(s1) || r.Wait <= 0 {
		t.Fatalf("live claim under a running job: %+v", r)
	}
	rec, _, _ := s.Record(ctx, "long", s2)
	if rec.State != locking.StateSkipped || rec.Error == "" {
		t.Fatalf("skipped record %+v", rec)
	}
	// Overlap allowed: each slot has its own lease.
	allow := live("par", s1, "r1")
	allow.AllowOverlap = true
	a := claimOne(t, s, allow)
	allow.Slot = s3
	b := claimOne(t, s, allow)
	if a.Outcome != locking.OutcomeWon || b.Outcome != locking.OutcomeWon || b.Fence != a.Fence+1 {
		t.Fatalf("overlap allowed: %+v %+v", a, b)
	}
	finish(s, first.Lease, locking.StateDone, "")
	finish(s, a.Lease, locking.StateDone, "")
	finish(s, b.Lease, locking.StateDone, "")
}

func TestSlotClaimBatchIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	counter := &pipelineCounter{}
	rdb.AddHook(counter)
	s, _ := locking.NewSlots(rdb, srv.Key("rt"))
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	slot := time.Unix(1_700_000_200, 0)
	var claims []locking.SlotClaim
	for i := range 100 {
		claims = append(claims, live(fmt.Sprintf("job-%03d", i), slot, "r1"))
	}
	before := counter.n.Load()
	res, err := s.Claim(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load() - before; got != 1 {
		t.Fatalf("100 claims took %d round trips, want 1", got)
	}
	var leases []*locking.SlotLease
	for _, r := range res {
		if r.Outcome != locking.OutcomeWon {
			t.Fatalf("%+v", r)
		}
		leases = append(leases, r.Lease)
	}
	before = counter.n.Load()
	for i, err := range s.Renew(ctx, leases) {
		if err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
	}
	if got := counter.n.Load() - before; got != 1 {
		t.Fatalf("100 renewals took %d round trips, want 1", got)
	}
	var reqs []locking.FinishRequest
	for _, l := range leases {
		reqs = append(reqs, locking.FinishRequest{Lease: l, State: locking.StateDone})
	}
	before = counter.n.Load()
	for i, err := range s.Finish(ctx, reqs) {
		if err != nil {
			t.Fatalf("finish %d: %v", i, err)
		}
	}
	if got := counter.n.Load() - before; got != 1 {
		t.Fatalf("100 finishes took %d round trips, want 1", got)
	}
	for _, l := range leases {
		if l.Context().Err() == nil {
			t.Fatal("a finished lease is still live")
		}
	}
}

// One call carries claims whose jobs differ in TTL, overlap, kind and miss
// reason (the script gets each combination once, and each claim points at
// its own): every claim must be decided with its own.
func TestSlotClaimMixedBatch(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	slot := time.Unix(1_700_000_300, 0)
	short := live("short", slot, "r1")
	short.LeaseTTL = 2 * time.Second
	long := live("long", slot, "r1")
	long.LeaseTTL = 40 * time.Second
	par := live("par", slot, "r1")
	par.AllowOverlap, par.LeaseTTL = true, 20*time.Second
	miss := live("gone", slot, "r1")
	miss.Kind, miss.Reason = locking.ClaimMiss, "everyone was down"
	late := live("late", slot, "r1")
	late.Deadline = time.Now().Add(-time.Second)
	res, err := s.Claim(ctx, []locking.SlotClaim{short, long, par, miss, late, long})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []locking.Outcome{locking.OutcomeWon, locking.OutcomeWon, locking.OutcomeWon,
		locking.OutcomeMissed, locking.OutcomeMissed, locking.OutcomeLost} {
		if res[i].Err != nil || res[i].Outcome != want {
			t.Fatalf("claim %d: %+v, want %s", i, res[i], want)
		}
	}
	if res[5].Holder != "r1" || res[5].Fence != res[1].Fence {
		t.Fatalf("the second claim of long in the batch: %+v, want lost to the first (fence %d)", res[5], res[1].Fence)
	}
	ttl := func(key string) time.Duration {
		d, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		key      string
		min, max time.Duration
	}{
		{s.Prefix() + ":{short}:lease", time.Second, 2 * time.Second},
		{s.Prefix() + ":{long}:lease", 39 * time.Second, 40 * time.Second},
		{s.Prefix() + ":{par}:lease:1700000300", 19 * time.Second, 20 * time.Second},
	} {
		if d := ttl(c.key); d < c.min || d > c.max {
			t.Errorf("%s has TTL %v, want %v..%v", c.key, d, c.min, c.max)
		}
	}
	if rec, _, _ := s.Record(ctx, "gone", slot); rec.State != locking.StateMissed || rec.Error != "everyone was down" {
		t.Errorf("the missed slot's record: %+v", rec)
	}
	if rec, _, _ := s.Record(ctx, "late", slot); rec.State != locking.StateMissed || !strings.HasPrefix(rec.Error, "misfire: ") {
		t.Errorf("the late slot's record: %+v", rec)
	}
	for _, i := range []int{0, 1, 2} {
		if tok := res[i].Lease.Token(); strings.Count(tok, ".") != 1 || res[i].Lease.Token() == res[(i+1)%3].Lease.Token() {
			t.Errorf("lease %d has token %q", i, tok)
		}
	}
}

func TestSlotClaimSurvivesScriptFlush(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil { // as after a restart or failover
		t.Fatal(err)
	}
	r := claimOne(t, s, live("flushed", time.Unix(1_700_000_300, 0), "r1"))
	if r.Outcome != locking.OutcomeWon {
		t.Fatalf("%+v", r)
	}
	finish(s, r.Lease, locking.StateDone, "")
}

func TestSlotRenewDetectsLoss(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	slot := time.Unix(1_700_000_400, 0)
	c := live("renewed", slot, "r1")
	c.LeaseTTL = 200 * time.Millisecond
	r := claimOne(t, s, c)
	for range 5 { // a renewal every TTL/3 keeps it
		time.Sleep(60 * time.Millisecond)
		if errs := s.Renew(ctx, []*locking.SlotLease{r.Lease}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	if err := r.Lease.Context().Err(); err != nil {
		t.Fatalf("renewed lease ended: %v", context.Cause(r.Lease.Context()))
	}
	rdb.Del(ctx, s.Prefix()+":{renewed}:lease")
	errs := s.Renew(ctx, []*locking.SlotLease{r.Lease})
	if !errors.Is(errs[0], locking.ErrLeaseLost) || !errors.Is(context.Cause(r.Lease.Context()), locking.ErrLeaseLost) {
		t.Fatalf("renew of a deleted lease: %v; cause %v", errs[0], context.Cause(r.Lease.Context()))
	}
}

// finish records one run's end.
func finish(s *locking.Slots, l *locking.SlotLease, state locking.SlotState, text string) error {
	return s.Finish(context.Background(), []locking.FinishRequest{{Lease: l, State: state, Error: text}})[0]
}

func takeover(job string, slot time.Time, replica string, retry bool, max int) locking.SlotClaim {
	c := live(job, slot, replica)
	c.Kind, c.Retry, c.MaxAttempts = locking.ClaimTakeover, retry, max
	return c
}

func TestSlotTakeoverRetry(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	slot := time.Unix(1_700_000_500, 0)
	first := claimOne(t, s, live("retried", slot, "dies"))
	if r := claimOne(t, s, takeover("retried", slot, "r2", true, 3)); r.Outcome != locking.OutcomeAlive || r.Wait <= 0 {
		t.Fatalf("takeover while the owner holds its lease: %+v", r)
	}
	rdb.Del(ctx, s.Prefix()+":{retried}:lease") // the owner's lease expires
	second := claimOne(t, s, takeover("retried", slot, "r2", true, 3))
	if second.Outcome != locking.OutcomeWon || second.Attempt != 2 || second.Fence <= first.Fence {
		t.Fatalf("takeover: %+v (first fence %d)", second, first.Fence)
	}
	// The old owner wakes up: it can neither renew nor finish.
	if errs := s.Renew(ctx, []*locking.SlotLease{first.Lease}); !errors.Is(errs[0], locking.ErrLeaseLost) {
		t.Fatalf("old owner's renew: %v", errs[0])
	}
	if err := finish(s, first.Lease, locking.StateDone, ""); !errors.Is(err, locking.ErrNotHeld) {
		t.Fatalf("old owner's finish: %v", err)
	}
	// A third replica sees attempt 2 alive.
	if r := claimOne(t, s, takeover("retried", slot, "r3", true, 3)); r.Outcome != locking.OutcomeAlive {
		t.Fatalf("%+v", r)
	}
	if err := finish(s, second.Lease, locking.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, takeover("retried", slot, "r3", true, 3)); r.Outcome != locking.OutcomeClosed || r.State != locking.StateDone {
		t.Fatalf("takeover of a finished slot: %+v", r)
	}
	rec, _, _ := s.Record(ctx, "retried", slot)
	if rec.Attempt != 2 || rec.Owner != "r2" || rec.State != locking.StateDone {
		t.Fatalf("record %+v", rec)
	}
}

func TestSlotTakeoverAbandon(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	slot := time.Unix(1_700_000_600, 0)
	claimOne(t, s, live("once", slot, "dies"))
	rdb.Del(ctx, s.Prefix()+":{once}:lease")
	r := claimOne(t, s, takeover("once", slot, "r2", false, 3))
	if r.Outcome != locking.OutcomeAbandoned || r.Holder != "dies" {
		t.Fatalf("%+v", r)
	}
	rec, _, _ := s.Record(ctx, "once", slot)
	if rec.State != locking.StateAbandoned || rec.Attempt != 1 || rec.Error == "" {
		t.Fatalf("record %+v", rec)
	}
	// Retry policy at the attempt limit abandons too.
	slot2 := slot.Add(time.Second)
	claimOne(t, s, live("once", slot2, "dies"))
	rdb.Del(ctx, s.Prefix()+":{once}:lease")
	if r := claimOne(t, s, takeover("once", slot2, "r2", true, 1)); r.Outcome != locking.OutcomeAbandoned {
		t.Fatalf("retry at max_attempts 1: %+v", r)
	}
}

func TestSlotStatusQueries(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	base := time.Unix(1_700_000_700, 0)
	var last *locking.SlotLease
	for i := range 12 {
		r := claimOne(t, s, live("status", base.Add(time.Duration(i)*time.Second), "r1"))
		if i < 11 {
			finish(s, r.Lease, locking.StateDone, "")
		} else {
			last = r.Lease
		}
	}
	recs, err := s.Records(ctx, "status", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 || !recs[0].Slot.Equal(base.Add(11*time.Second)) || recs[0].State != locking.StateRunning {
		t.Fatalf("%d records, newest %+v", len(recs), recs[0])
	}
	replica, slot, ttl, err := s.Holder(ctx, "status")
	if err != nil || replica != "r1" || !slot.Equal(base.Add(11*time.Second)) || ttl <= 0 {
		t.Fatalf("Holder = %s %v %v %v", replica, slot, ttl, err)
	}
	lasts, err := s.LastSlots(ctx, []string{"status", "never"})
	if err != nil || len(lasts) != 1 || !lasts["status"].Equal(base.Add(11*time.Second)) {
		t.Fatalf("LastSlots = %v, %v", lasts, err)
	}
	finish(s, last, locking.StateDone, "")
}

func TestSlotsOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	s, err := locking.NewSlots(c.Client(), "sc")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	slot := time.Unix(1_700_000_800, 0)
	var claims []locking.SlotClaim
	for i := range 12 { // jobs spread over the three masters
		claims = append(claims, live(fmt.Sprintf("job-%d", i), slot, "r1"))
	}
	// Two slots of one job share a hash slot, and so a script call.
	overlapping := live("job-0", slot.Add(time.Second), "r1")
	overlapping.AllowOverlap = true
	claims = append(claims, overlapping)
	res, err := s.Claim(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	var leases []*locking.SlotLease
	for i, r := range res {
		if r.Err != nil || r.Outcome != locking.OutcomeWon {
			t.Fatalf("claim %d: %+v", i, r)
		}
		leases = append(leases, r.Lease)
	}
	for i, err := range s.Renew(ctx, leases) {
		if err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
	}
	tk := takeover("job-0", slot, "r2", true, 3)
	if r := claimOne(t, s, tk); r.Outcome != locking.OutcomeAlive {
		t.Fatalf("takeover on cluster: %+v", r)
	}
	for _, l := range leases {
		if err := finish(s, l, locking.StateDone, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Records(ctx, "job-3", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LastSlots(ctx, []string{"job-1", "job-2"}); err != nil {
		t.Fatal(err)
	}
}

// wrappedClient hides the concrete client type, as an instrumentation
// wrapper would: Slots then sends one script call per claim.
type wrappedClient struct{ *redis.Client }

func TestSlotClaimThroughAWrapper(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	counter := &pipelineCounter{}
	rdb.AddHook(counter)
	s, _ := locking.NewSlots(wrappedClient{rdb}, srv.Key("wrapped"))
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil { // connection set up, scripts cached
		t.Fatal(err)
	}
	var claims []locking.SlotClaim
	for i := range 10 {
		claims = append(claims, live(fmt.Sprintf("w%d", i), time.Unix(1_700_002_000, 0), "r1"))
	}
	claims = append(claims, live("w0", time.Unix(1_700_002_000, 0), "r2"))
	before := counter.n.Load()
	res, err := s.Claim(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Fatalf("11 claims took %d round trips, want 1", n)
	}
	for i, r := range res[:10] {
		if r.Err != nil || r.Outcome != locking.OutcomeWon {
			t.Fatalf("claim %d: %+v", i, r)
		}
	}
	if last := res[10]; last.Outcome != locking.OutcomeLost || last.Holder != "r1" {
		t.Fatalf("second claim of w0 in the same batch: %+v", last)
	}
}

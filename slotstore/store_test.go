package slotstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
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

func newSlots(t *testing.T) (*redistest.Server, *redis.Client, *slotstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	s, err := slotstore.New(rdb, srv.Key("sc"))
	if err != nil {
		t.Fatal(err)
	}
	return srv, rdb, s
}

// newOwnedSlots is newSlots on a Redis of the test's own: for tests that
// read or reset the server's statistics.
func newOwnedSlots(t *testing.T) (*redis.Client, *slotstore.Store) {
	t.Helper()
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	s, err := slotstore.New(rdb, srv.Key("sc"))
	if err != nil {
		t.Fatal(err)
	}
	return rdb, s
}

func live(job string, at time.Time, replica string) slot.Claim {
	return slot.Claim{Kind: slot.ClaimLive, Job: job, Slot: at, Replica: replica,
		LeaseTTL: 5 * time.Second, Retention: time.Hour, Deadline: time.Now().Add(time.Minute)}
}

func claimOne(t *testing.T, s *slotstore.Store, c slot.Claim) slot.Result {
	t.Helper()
	res, err := s.Claim(context.Background(), []slot.Claim{c})
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
	at := time.Unix(1_700_000_000, 0)
	const replicas = 10
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = map[string]slot.Result{}
		start   = make(chan struct{})
	)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("r%d", i)
			res, err := s.Claim(context.Background(), []slot.Claim{live("draw", at, name)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res = []slot.Result{{Err: err}}
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
		if r.Outcome == slot.OutcomeWon {
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
			// Fences start at Redis's clock in microseconds (see fence_lib.lua).
			if r.Lease == nil || r.Fence < time.Now().Add(-time.Minute).UnixMicro() || r.Attempt != 1 {
				t.Fatalf("winner's result %+v", r)
			}
			continue
		}
		if r.Outcome != slot.OutcomeLost || r.Holder != winner || r.State != slot.StateRunning {
			t.Fatalf("%s: %+v, want lost to %s while running", name, r, winner)
		}
	}
}

// TestSlotFinishedStaysClosed is the fast-job double run: the winner finishes
// in a millisecond, a replica whose clock is behind claims the same slot
// afterwards, and must lose.
// TestSlotClaimRetryIsRecognised: a claim sent again with its token, because
// its reply was lost, is answered as the same claim: won, with the same fence
// (no second fence counted), and its lease's TTL restored. If another run
// took the job's lease in between, the record is this replica's with no lease
// behind it: the answer is lost, to itself, running, for a takeover to settle.
func TestSlotClaimRetryIsRecognised(t *testing.T) {
	_, rdb, s := newSlots(t)
	c := live("j", time.Unix(1_700_001_000, 0), "r1")
	c.Token = "tok-1"
	first := claimOne(t, s, c)
	lapse(t, rdb, s, "j", "lease") // time passes while the reply is lost
	again := claimOne(t, s, c)
	if first.Outcome != slot.OutcomeWon || again.Outcome != slot.OutcomeWon || again.Fence != first.Fence || again.Lease.Token() != "tok-1" {
		t.Fatalf("claim %+v, then the same claim again %+v: want won twice with one fence and the claim's token", first, again)
	}
	if ttl := leaseTTL(t, rdb, s, "j", "lease"); ttl < 4*time.Second {
		t.Fatalf("the retried claim left its lease %v to live, want its TTL (5s) back", ttl)
	}
	// Another run takes the job's lease (the first one's lapsed).
	lapse(t, rdb, s, "j", "lease")
	other := claimOne(t, s, live("j", time.Unix(1_700_001_001, 0), "r2"))
	if other.Outcome != slot.OutcomeWon {
		t.Fatalf("the next slot: %+v", other)
	}
	late := claimOne(t, s, c)
	if late.Outcome != slot.OutcomeLost || late.Holder != "r1" || late.State != slot.StateRunning {
		t.Fatalf("retried claim after another run took the job: %+v, want lost to r1, running", late)
	}
	// A claim with another token is a rival, not a retry.
	rival := c
	rival.Token = "tok-2"
	if r := claimOne(t, s, rival); r.Outcome != slot.OutcomeLost {
		t.Fatalf("same slot, same replica, another token: %+v, want lost", r)
	}
}

// TestARestartedReplicaDoesNotRunItsOldSlotAgain: a replica that restarts
// under the same ID (a StatefulSet's pod, Compose's worker-1) after its run's
// lease lapsed, before a takeover settled the slot, claims the slot again
// with a new token. Only the token makes a claim the same claim sent again:
// this one loses to the record its old process left, which the takeover then
// settles. Were the replica's ID enough, the slot would run twice, the second
// time on the first run's fence.
func TestARestartedReplicaDoesNotRunItsOldSlotAgain(t *testing.T) {
	for _, contested := range []bool{false, true} {
		t.Run(fmt.Sprintf("contested=%v", contested), func(t *testing.T) {
			_, rdb, s := newSlots(t)
			c := live("j", time.Unix(1_700_001_000, 0), "r1")
			c.Token, c.Contested = "old-process", contested
			first := claimOne(t, s, c)
			if first.Outcome != slot.OutcomeWon {
				t.Fatalf("first claim: %+v", first)
			}
			lapse(t, rdb, s, "j", "lease") // the old process died with its run
			restarted := c
			restarted.Token = "new-process"
			r := claimOne(t, s, restarted)
			if r.Outcome != slot.OutcomeLost || r.Holder != "r1" || r.State != slot.StateRunning || r.Fence != first.Fence {
				t.Fatalf("the same slot claimed by the restarted r1 (another token): %+v; want lost to the old run's record (r1, running, fence %d)",
					r, first.Fence)
			}
		})
	}
}

// TestAnOlderSlotWonLaterKeepsTheJobsLast: the job's state keeps the latest
// slot that has a record, which a starting replica plans its catch-up from.
// A catch-up or backfill that wins an older slot after a newer one ran, or a
// miss recorded for one, must not move it back, or every start would plan
// the slots between again.
func TestAnOlderSlotWonLaterKeepsTheJobsLast(t *testing.T) {
	_, _, s := newSlots(t)
	newer, older := time.Now().Truncate(time.Second).Add(-time.Minute), time.Now().Truncate(time.Second).Add(-2*time.Minute)
	if r := claimOne(t, s, live("j", newer, "r1")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the newer slot: %+v", r)
	} else if err := finish(s, r.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	c := live("j", older, "r2")
	c.Kind, c.Deadline = slot.ClaimCatchup, time.Time{}
	if r := claimOne(t, s, c); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the older slot's catch-up claim: %+v", r)
	}
	miss := live("j", older.Add(-time.Minute), "r2") // and an older one recorded missed
	miss.Kind, miss.Deadline, miss.Reason = slot.ClaimMiss, time.Time{}, "catch-up: not run"
	if r := claimOne(t, s, miss); r.Outcome != slot.OutcomeMissed {
		t.Fatalf("the oldest slot's miss claim: %+v", r)
	}
	states, err := s.JobStates(context.Background(), []string{"j"})
	if err != nil {
		t.Fatal(err)
	}
	if got := states["j"].Last; !got.Equal(newer) {
		t.Fatalf("the job's last slot after a catch-up won %v and a miss recorded before it: %v, want %v (the newer slot, which ran first)", older, got, newer)
	}
}

// TestFencesSurviveDataLoss: Redis restarts without persistence, so the
// fence counters are gone. The next fences must still be above every fence
// handed out before, or a store that refuses lower fences would refuse every
// real run, and a replayed slot would reuse a fence.
func TestFencesSurviveDataLoss(t *testing.T) {
	srv := redistest.StartOwned(t)
	s, err := slotstore.New(srv.Client(), "sc")
	if err != nil {
		t.Fatal(err)
	}
	var before int64
	for i := range 3 {
		r := claimOne(t, s, live("fenced", time.Unix(1_700_002_000+int64(i), 0), "r1"))
		if r.Fence <= before {
			t.Fatalf("fence %d after %d", r.Fence, before)
		}
		before = r.Fence
		finish(s, r.Lease, slot.StateDone, "")
	}
	srv.Restart() // no persistence: every key is gone
	for _, job := range []string{"fenced", "other"} {
		r := claimOne(t, s, live(job, time.Unix(1_700_002_000, 0), "r2"))
		if r.Outcome != slot.OutcomeWon || r.Fence <= before {
			t.Fatalf("%s after the restart: %+v; want won with a fence above %d", job, r, before)
		}
	}
}

// TestFenceAboveTheClock: a fence counter ahead of Redis's clock (a
// failover to a host whose clock is behind the old master's) still gives
// every claim a fence above the last, one more each time.
func TestFenceAboveTheClock(t *testing.T) {
	_, rdb, s := newSlots(t)
	ahead := time.Now().Add(time.Hour).UnixMicro()
	setFence(t, rdb, s, "ahead", ahead)
	for i := range int64(3) {
		r := claimOne(t, s, live("ahead", time.Unix(1_700_002_100+i, 0), "r1"))
		if r.Outcome != slot.OutcomeWon || r.Fence != ahead+1+i {
			t.Fatalf("claim %d: %+v; want won with fence %d", i, r, ahead+1+i)
		}
		finish(s, r.Lease, slot.StateDone, "")
	}
	// And once the clock is past the counter, the clock's time again.
	setFence(t, rdb, s, "ahead", 5)
	before := time.Now().UnixMicro()
	r := claimOne(t, s, live("ahead", time.Unix(1_700_002_200, 0), "r1"))
	if r.Outcome != slot.OutcomeWon || r.Fence < before-int64(time.Second/time.Microsecond) || r.Fence > time.Now().Add(time.Second).UnixMicro() {
		t.Fatalf("claim with the counter behind the clock: %+v; want Redis's time in µs (about %d)", r, before)
	}
}

// TestProbeReportsDataLoss: the probe reads Redis's clock and the epoch key,
// which the first probe creates. Once Redis loses its data, the epoch is
// another one.
func TestProbeReportsDataLoss(t *testing.T) {
	srv := redistest.StartOwned(t)
	s, _ := slotstore.New(srv.Client(), "sc")
	ctx := context.Background()
	first, err := s.Probe(ctx)
	if err != nil || first.Epoch == "" || first.Now.IsZero() {
		t.Fatalf("probe: %+v, %v", first, err)
	}
	if d := time.Since(first.Now); d < -time.Second || d > time.Second {
		t.Fatalf("probe's clock %v is %v from ours", first.Now, d)
	}
	again, _ := s.Probe(ctx)
	if again.Epoch != first.Epoch {
		t.Fatalf("epoch changed with no data loss: %q, then %q", first.Epoch, again.Epoch)
	}
	srv.Restart()
	after, err := s.Probe(ctx)
	if err != nil || after.Epoch == "" || after.Epoch == first.Epoch {
		t.Fatalf("after a restart without persistence: %+v, %v; want a new epoch", after, err)
	}
}

// TestBigBatchesAreChunked: 5,000 claims in one Claim, then their finishes,
// then 5,000 takeovers. Each goes out in one round trip, as ceil(5000/64) =
// 79 script calls of at most 64 items, so that no call blocks Redis for
// long: other clients' short leases are at risk behind a long one. The
// calls are counted in SLOWLOG, which logs every command here, with their
// time on Redis. That time is logged, not asserted: a busy machine inflates
// it whenever it preempts Redis mid-call (under three concurrent test
// suites a 64-item call once took 45ms). On an idle 2-core machine the
// longest call takes about 2ms; one call of all 5,000 items took 160ms or
// more. The count of calls is what proves the chunking.
func TestBigBatchesAreChunked(t *testing.T) {
	srv := redistest.StartOwned(t)
	opts := srv.Options()
	opts.ReadTimeout = time.Minute // 5,000 items on a machine busy with other tests
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s, _ := slotstore.New(rdb, "big")
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	const n, perCall = 5000, 64
	trips := &pipelineCounter{}
	rdb.AddHook(trips)
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ConfigSet(ctx, "slowlog-max-len", "100000")
	// measure runs do in one round trip, and returns the number of script
	// calls it made and the longest.
	measure := func(name string, do func()) {
		rdb.SlowLogReset(ctx)
		trips.n.Store(0)
		do()
		if got := trips.n.Load(); got != 1 {
			t.Fatalf("%s of %d took %d round trips, want 1", name, n, got)
		}
		logs, err := rdb.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		calls := 0
		for _, l := range logs {
			if len(l.Args) > 0 && strings.EqualFold(l.Args[0], "evalsha") {
				calls++
				worst = max(worst, l.Duration)
			}
		}
		if want := (n + perCall - 1) / perCall; calls != want {
			t.Fatalf("%s of %d: %d script calls, want %d (at most %d items each)", name, n, calls, want, perCall)
		}
		t.Logf("%s of %d: %d script calls, the longest took %v on Redis", name, n, calls, worst)
	}
	at := time.Unix(1_700_010_000, 0)
	claims := make([]slot.Claim, n)
	for i := range claims {
		claims[i] = live("job-"+strconv.Itoa(i), at, "r1")
	}
	var leases []slot.Lease
	measure("claims", func() {
		res, err := s.Claim(ctx, claims)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != slot.OutcomeWon {
				t.Fatalf("claim: %+v", r)
			}
			leases = append(leases, r.Lease)
		}
	})
	measure("finishes", func() {
		reqs := make([]slot.FinishRequest, n)
		for i, l := range leases {
			reqs[i] = slot.FinishRequest{Lease: l, State: slot.StateDone}
		}
		for _, err := range s.Finish(ctx, reqs) {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	for i := range claims {
		claims[i] = takeover("job-"+strconv.Itoa(i), at, "r2", true, 3)
	}
	measure("takeovers", func() {
		res, err := s.Claim(ctx, claims)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != slot.OutcomeClosed {
				t.Fatalf("takeover of a finished slot: %+v", r)
			}
		}
	})
}

func TestSlotFinishedStaysClosed(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_060, 0)
	won := claimOne(t, s, live("fast", at, "early"))
	if won.Outcome != slot.OutcomeWon {
		t.Fatalf("%+v", won)
	}
	if err := finish(s, won.Lease, slot.StateRunning, ""); err == nil || errors.Is(err, slot.ErrNotHeld) {
		t.Fatalf("finish with a state that is not final: %v, want a usage error", err)
	}
	if won.Lease.Context().Err() != nil {
		t.Fatal("a refused finish ended the lease")
	}
	if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if won.Lease.Context().Err() == nil {
		t.Fatal("the lease is still live after Finish")
	}
	late := claimOne(t, s, live("fast", at, "late"))
	if late.Outcome != slot.OutcomeLost || late.State != slot.StateDone || late.Holder != "early" {
		t.Fatalf("late claim of a finished slot: %+v", late)
	}
	rec, ok, err := s.Record(ctx, "fast", at)
	if err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if rec.State != slot.StateDone || rec.Owner != "early" || rec.Fence != won.Fence || rec.Finished.IsZero() {
		t.Fatalf("record %+v", rec)
	}
	// The lease went with the finish; the record stays for the retention.
	ttl := rdb.PTTL(ctx, slotstore.RecordKey(s.Prefix(), "fast", at)).Val()
	if ttl < 59*time.Minute {
		t.Fatalf("record TTL %v, want the 1h retention", ttl)
	}
	// A second finish is refused (the run is over) and changes nothing.
	if err := finish(s, won.Lease, slot.StateFailed, "again"); !errors.Is(err, slot.ErrNotHeld) {
		t.Fatalf("second finish with another state: %v", err)
	}
}

func TestSlotMisfireRecordedOnRedisClock(t *testing.T) {
	_, _, s := newSlots(t)
	at := time.Now().Add(-2 * time.Minute).Truncate(time.Second)
	c := live("late", at, "r1")
	c.Deadline = at.Add(time.Minute) // grace 1m, already over on Redis's clock
	res := claimOne(t, s, c)
	if res.Outcome != slot.OutcomeMissed || res.Late < 2*time.Minute-time.Second {
		t.Fatalf("%+v, want missed about 2m late", res)
	}
	rec, _, _ := s.Record(context.Background(), "late", at)
	if rec.State != slot.StateMissed || rec.Owner != "r1" || rec.Error == "" {
		t.Fatalf("record %+v", rec)
	}
	again := claimOne(t, s, live("late", at, "r2"))
	if again.Outcome != slot.OutcomeLost || again.State != slot.StateMissed {
		t.Fatalf("claim of a missed slot: %+v", again)
	}
}

func TestSlotOverlap(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	s1, s2, s3 := time.Unix(1_700_000_100, 0), time.Unix(1_700_000_101, 0), time.Unix(1_700_000_102, 0)
	const holder = "pod 7 eu:1" // a replica ID may hold spaces and colons
	first := claimOne(t, s, live("long", s1, holder))
	if first.Outcome != slot.OutcomeWon {
		t.Fatal(first)
	}
	// Catch-up mode: busy, nothing recorded.
	cu := live("long", s2, "r2")
	cu.Kind = slot.ClaimCatchup
	if r := claimOne(t, s, cu); r.Outcome != slot.OutcomeBusy || r.Holder != holder || r.Wait <= 0 || !r.HolderSlot.Equal(s1) {
		t.Fatalf("catch-up under a running job: %+v", r)
	}
	if _, ok, _ := s.Record(ctx, "long", s2); ok {
		t.Fatal("busy catch-up left a record")
	}
	if h, hs, ttl, err := s.Holder(ctx, "long"); err != nil || h != holder || !hs.Equal(s1) || ttl <= 0 {
		t.Fatalf("Holder = %q %v %v %v", h, hs, ttl, err)
	}
	// Live: recorded skipped, naming the run that holds the job.
	if r := claimOne(t, s, live("long", s2, "r2")); r.Outcome != slot.OutcomeSkipped || r.Holder != holder ||
		!r.HolderSlot.Equal(s1) || r.Wait <= 0 {
		t.Fatalf("live claim under a running job: %+v", r)
	}
	rec, _, _ := s.Record(ctx, "long", s2)
	if want := "overlap: the run of slot " + s1.UTC().Format(time.RFC3339) + " on " + holder + " still holds the job"; rec.State != slot.StateSkipped || rec.Error != want {
		t.Fatalf("skipped record %+v; want the reason %q", rec, want)
	}
	// Overlap allowed: each slot has its own lease.
	allow := live("par", s1, "r1")
	allow.AllowOverlap = true
	a := claimOne(t, s, allow)
	allow.Slot = s3
	b := claimOne(t, s, allow)
	if a.Outcome != slot.OutcomeWon || b.Outcome != slot.OutcomeWon || b.Fence <= a.Fence {
		t.Fatalf("overlap allowed: %+v %+v", a, b)
	}
	for _, l := range []slot.Lease{first.Lease, a.Lease, b.Lease} {
		if err := finish(s, l, slot.StateDone, ""); err != nil {
			t.Fatal(err)
		}
	}
	// A finished slot's own lease leaves the job's state: a job that allows
	// overlap would otherwise keep one field per slot that ever ran, and
	// every claim reads that hash.
	fields, err := rdb.HKeys(ctx, stateKey(s, "par")).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if strings.HasPrefix(f, "lease:") {
			t.Fatalf("after both runs finished, the job's state keeps %s (fields %v)", f, fields)
		}
	}
}

func TestSlotClaimBatchIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	counter := &pipelineCounter{}
	rdb.AddHook(counter)
	s, _ := slotstore.New(rdb, srv.Key("rt"))
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_200, 0)
	var claims []slot.Claim
	for i := range 100 {
		claims = append(claims, live(fmt.Sprintf("job-%03d", i), at, "r1"))
	}
	before := counter.n.Load()
	res, err := s.Claim(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load() - before; got != 1 {
		t.Fatalf("100 claims took %d round trips, want 1", got)
	}
	var leases []slot.Lease
	for _, r := range res {
		if r.Outcome != slot.OutcomeWon {
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
	var reqs []slot.FinishRequest
	for _, l := range leases {
		reqs = append(reqs, slot.FinishRequest{Lease: l, State: slot.StateDone})
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
	at := time.Unix(1_700_000_300, 0)
	short := live("short", at, "r1")
	short.LeaseTTL = 2 * time.Second
	long := live("long", at, "r1")
	long.LeaseTTL = 40 * time.Second
	par := live("par", at, "r1")
	par.AllowOverlap, par.LeaseTTL = true, 20*time.Second
	miss := live("gone", at, "r1")
	miss.Kind, miss.Reason, miss.Deadline = slot.ClaimMiss, "everyone was down", time.Time{} // no deadline: recorded at once
	late := live("late", at, "r1")
	late.Deadline = time.Now().Add(-time.Second)
	res, err := s.Claim(ctx, []slot.Claim{short, long, par, miss, late, long})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []slot.Outcome{slot.OutcomeWon, slot.OutcomeWon, slot.OutcomeWon,
		slot.OutcomeMissed, slot.OutcomeMissed, slot.OutcomeLost} {
		if res[i].Err != nil || res[i].Outcome != want {
			t.Fatalf("claim %d: %+v, want %s", i, res[i], want)
		}
	}
	if res[5].Holder != "r1" || res[5].Fence != res[1].Fence {
		t.Fatalf("the second claim of long in the batch: %+v, want lost to the first (fence %d)", res[5], res[1].Fence)
	}
	for _, c := range []struct {
		job, field string
		min, max   time.Duration
	}{
		{"short", "lease", time.Second, 2 * time.Second},
		{"long", "lease", 39 * time.Second, 40 * time.Second},
		{"par", "lease:1700000300", 19 * time.Second, 20 * time.Second},
	} {
		if d := leaseTTL(t, rdb, s, c.job, c.field); d < c.min || d > c.max {
			t.Errorf("the %s of %s has %v left, want %v..%v", c.field, c.job, d, c.min, c.max)
		}
	}
	if rec, _, _ := s.Record(ctx, "gone", at); rec.State != slot.StateMissed || rec.Error != "everyone was down" {
		t.Errorf("the missed slot's record: %+v", rec)
	}
	if rec, _, _ := s.Record(ctx, "late", at); rec.State != slot.StateMissed || !strings.HasPrefix(rec.Error, "misfire: ") {
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
	if r.Outcome != slot.OutcomeWon {
		t.Fatalf("%+v", r)
	}
	finish(s, r.Lease, slot.StateDone, "")
}

func TestSlotRenewDetectsLoss(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_400, 0)
	c := live("renewed", at, "r1")
	c.LeaseTTL = 600 * time.Millisecond
	r := claimOne(t, s, c)
	for range 5 { // a renewal every TTL/3 keeps it past its TTL, with 400 ms to spare on a busy machine
		time.Sleep(200 * time.Millisecond)
		if errs := s.Renew(ctx, []slot.Lease{r.Lease}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	if err := r.Lease.Context().Err(); err != nil {
		t.Fatalf("renewed lease ended: %v", context.Cause(r.Lease.Context()))
	}
	dropLease(t, rdb, s, "renewed", "lease")
	errs := s.Renew(ctx, []slot.Lease{r.Lease})
	if !errors.Is(errs[0], slot.ErrLeaseLost) || !errors.Is(context.Cause(r.Lease.Context()), slot.ErrLeaseLost) {
		t.Fatalf("renew of a deleted lease: %v; cause %v", errs[0], context.Cause(r.Lease.Context()))
	}
}

// TestRenewDoesNotBringALapsedLeaseBack: a renewal that reaches Redis after
// the lease ran out on its clock (the replica paused, or the renewal was
// delayed) finds the run's token still there, as no other run has taken the
// job yet. It must not renew it: the owner's own timer has ended the run
// (its TTL is counted from the send, with a margin, so it ends first), and a
// lease brought back would hold the job for a run that is over, and keep a
// watcher from settling the slot.
func TestRenewDoesNotBringALapsedLeaseBack(t *testing.T) {
	_, rdb, s := newSlots(t)
	r := claimOne(t, s, live("lapsed", time.Unix(1_700_000_450, 0), "r1"))
	lapse(t, rdb, s, "lapsed", "lease")
	errs := s.Renew(context.Background(), []slot.Lease{r.Lease})
	if !errors.Is(errs[0], slot.ErrLeaseLost) || !errors.Is(context.Cause(r.Lease.Context()), slot.ErrLeaseLost) {
		t.Fatalf("renewal of a lease lapsed on Redis's clock: %v; the lease's cause %v; want both lost", errs[0], context.Cause(r.Lease.Context()))
	}
	if ttl := leaseTTL(t, rdb, s, "lapsed", "lease"); ttl > 0 {
		t.Fatalf("the lapsed lease was brought back for %v", ttl)
	}
}

// TestRenewKeepsTheRecord: a run longer than its record's retention keeps
// its record, which each renewal gives the whole retention again. Were it to
// expire mid-run, the slot would have no record: a late claim would run it
// again, and the run's next renewal would report its record gone.
func TestRenewKeepsTheRecord(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_460, 0)
	r := claimOne(t, s, live("long-run", at, "r1")) // retention 1h
	key := slotstore.RecordKey(s.Prefix(), "long-run", at)
	if err := rdb.PExpire(ctx, key, time.Minute).Err(); err != nil { // most of the retention has passed
		t.Fatal(err)
	}
	if errs := s.Renew(ctx, []slot.Lease{r.Lease}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl < 59*time.Minute {
		t.Fatalf("after a renewal the record has %v to live, want the 1h retention again", ttl)
	}
}

// finish records one run's end.
func finish(s *slotstore.Store, l slot.Lease, state slot.State, text string) error {
	return s.Finish(context.Background(), []slot.FinishRequest{{Lease: l, State: state, Error: text}})[0]
}

func takeover(job string, at time.Time, replica string, retry bool, max int) slot.Claim {
	c := live(job, at, replica)
	c.Kind, c.Retry, c.MaxAttempts = slot.ClaimTakeover, retry, max
	return c
}

func TestSlotTakeoverRetry(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_500, 0)
	first := claimOne(t, s, live("retried", at, "dies"))
	if r := claimOne(t, s, takeover("retried", at, "r2", true, 3)); r.Outcome != slot.OutcomeAlive || r.Wait <= 0 {
		t.Fatalf("takeover while the owner holds its lease: %+v", r)
	}
	lapse(t, rdb, s, "retried", "lease") // the owner's lease expires
	second := claimOne(t, s, takeover("retried", at, "r2", true, 3))
	if second.Outcome != slot.OutcomeWon || second.Attempt != 2 || second.Fence <= first.Fence {
		t.Fatalf("takeover: %+v (first fence %d)", second, first.Fence)
	}
	// The old owner wakes up: it can neither renew nor finish. A takeover
	// is no data loss.
	if errs := s.Renew(ctx, []slot.Lease{first.Lease}); !errors.Is(errs[0], slot.ErrLeaseLost) || errors.Is(errs[0], slot.ErrDataLoss) {
		t.Fatalf("old owner's renew: %v; want lease lost, not data loss", errs[0])
	}
	if err := finish(s, first.Lease, slot.StateDone, ""); !errors.Is(err, slot.ErrNotHeld) || errors.Is(err, slot.ErrDataLoss) {
		t.Fatalf("old owner's finish: %v; want not held, not data loss", err)
	}
	// A third replica sees attempt 2 alive.
	if r := claimOne(t, s, takeover("retried", at, "r3", true, 3)); r.Outcome != slot.OutcomeAlive {
		t.Fatalf("%+v", r)
	}
	if err := finish(s, second.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if r := claimOne(t, s, takeover("retried", at, "r3", true, 3)); r.Outcome != slot.OutcomeClosed || r.State != slot.StateDone {
		t.Fatalf("takeover of a finished slot: %+v", r)
	}
	rec, _, _ := s.Record(ctx, "retried", at)
	if rec.Attempt != 2 || rec.Owner != "r2" || rec.State != slot.StateDone {
		t.Fatalf("record %+v", rec)
	}
}

// TestSlotTakeoverBusyNamesTheHolder: a retry takeover of a slot whose owner
// died while a later slot's run holds the job answers busy, naming that run
// (replica and slot) so that the caller can watch it too. The takeover script
// used to answer busy without the holder's slot, which read as a malformed
// reply: the takeover failed instead of waiting.
func TestSlotTakeoverBusyNamesTheHolder(t *testing.T) {
	_, rdb, s := newSlots(t)
	dead, later := time.Unix(1_700_000_550, 0), time.Unix(1_700_000_551, 0)
	claimOne(t, s, live("busy", dead, "dies"))
	lapse(t, rdb, s, "busy", "lease") // the owner's lease expires
	if r := claimOne(t, s, live("busy", later, "r3")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("the later slot: %+v", r)
	}
	r := claimOne(t, s, takeover("busy", dead, "r2", true, 3))
	if r.Outcome != slot.OutcomeBusy || r.Holder != "r3" || !r.HolderSlot.Equal(later) || r.Wait <= 0 {
		t.Fatalf("takeover while a later run holds the job: %+v, want busy naming r3 and slot %d", r, later.Unix())
	}
}

// TestARetryTakesTheJobsNextTurn: a retry takeover (overlap skip) that
// finds a later slot's run holding the job takes the job's next turn. Once
// that run has ended, a claim of another slot is recorded skipped, naming
// the retry, rather than taking the job first (before, a job whose runs
// followed each other never let the retry in, and its slot stayed running);
// the takeover, back, wins attempt 2, and the turn ends with it. It ends
// too when an owner that was only slow finishes its slot, and a turn
// nobody came back for lapses.
func TestARetryTakesTheJobsNextTurn(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	dead := time.Unix(1_700_000_560, 0)
	claimOne(t, s, live("turn", dead, "dies"))
	lapse(t, rdb, s, "turn", "lease") // the owner's lease expires
	held := claimOne(t, s, live("turn", dead.Add(15*time.Second), "r3"))
	if held.Outcome != slot.OutcomeWon {
		t.Fatalf("the later slot: %+v", held)
	}
	if r := claimOne(t, s, takeover("turn", dead, "r2", true, 3)); r.Outcome != slot.OutcomeBusy || r.Holder != "r3" {
		t.Fatalf("retry takeover while a later run holds the job: %+v, want busy", r)
	}
	if err := finish(s, held.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if who, at, ttl, err := s.Turn(ctx, "turn"); err != nil || who != "r2" || !at.Equal(dead) || ttl <= 0 {
		t.Fatalf("Turn = %q, %v, %v, %v; want r2's retry of %v", who, at, ttl, err, dead)
	}
	next := dead.Add(30 * time.Second)
	r := claimOne(t, s, live("turn", next, "r4"))
	if r.Outcome != slot.OutcomeSkipped || r.Holder != "r2" || !r.HolderSlot.Equal(dead) {
		t.Fatalf("a claim while the retry waits for its turn: %+v, want skipped, held for r2's retry of %d", r, dead.Unix())
	}
	if rec, _, _ := s.Record(ctx, "turn", next); !strings.Contains(rec.Error, "held for the retry of slot 2023-11-14T22:22:40Z") {
		t.Errorf("the skipped slot's record says %q", rec.Error)
	}
	second := claimOne(t, s, takeover("turn", dead, "r2", true, 3))
	if second.Outcome != slot.OutcomeWon || second.Attempt != 2 {
		t.Fatalf("the retry, back: %+v, want attempt 2 won", second)
	}
	if err := finish(s, second.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if who, _, _, err := s.Turn(ctx, "turn"); err != nil || who != "" {
		t.Fatalf("Turn after the retry won = %q, %v; want none", who, err)
	}
	if r := claimOne(t, s, live("turn", dead.Add(45*time.Second), "r4")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("a claim after the retry: %+v, want won", r)
	} else {
		finish(s, r.Lease, slot.StateDone, "")
	}
	// An owner that was only slow (paused past its lease) finishes after a
	// watcher's retry took the turn: the slot is done, and the turn ends
	// with it rather than skip later slots until it lapses.
	slow := dead.Add(75 * time.Second)
	late := claimOne(t, s, live("turn", slow, "slow"))
	lapse(t, rdb, s, "turn", "lease")
	busy := claimOne(t, s, live("turn", slow.Add(time.Second), "r3"))
	if r := claimOne(t, s, takeover("turn", slow, "r2", true, 3)); r.Outcome != slot.OutcomeBusy {
		t.Fatalf("retry takeover of the slow owner's slot: %+v, want busy", r)
	}
	// (lapse ends the lease in Redis alone: on this process's clock it
	// still holds, so the finish says it was lost unseen, and writes the
	// run's end all the same.)
	if err := finish(s, late.Lease, slot.StateDone, ""); err != nil && (!errors.Is(err, slot.ErrLeaseLost) || errors.Is(err, slot.ErrNotHeld)) {
		t.Fatalf("the slow owner's finish: %v", err)
	}
	if who, _, _, err := s.Turn(ctx, "turn"); err != nil || who != "" {
		t.Fatalf("Turn after the slow owner finished = %q, %v; want none", who, err)
	}
	finish(s, busy.Lease, slot.StateDone, "")
	if r := claimOne(t, s, live("turn", slow.Add(15*time.Second), "r4")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("a claim after the slow owner finished: %+v, want won", r)
	} else {
		finish(s, r.Lease, slot.StateDone, "")
	}
	// A turn whose takeover never came back holds the job no longer.
	setLease(t, rdb, s, "turn", "turn", "gone", strconv.FormatInt(dead.Unix()-15, 10), "r9", -time.Millisecond)
	if r := claimOne(t, s, live("turn", dead.Add(60*time.Second), "r4")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("a claim under a lapsed turn: %+v, want won", r)
	}
}

// TestTakeoverFollowsTheOwnersLease: in a rolling deploy, the owner ran with
// overlap skip (the job's lease) and a newer replica, with overlap allow,
// checks on the slot. It must judge the owner by the lease the record names,
// not by its own setting: the owner is alive. Once the owner is gone and the
// slot is taken over, the old owner's next renewal must fail, whatever its
// lease key says.
func TestTakeoverFollowsTheOwnersLease(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_520, 0)
	first := claimOne(t, s, live("deploy", at, "old")) // overlap skip: the job's lease
	check := takeover("deploy", at, "new", true, 3)
	check.AllowOverlap = true // the new replica's config
	if r := claimOne(t, s, check); r.Outcome != slot.OutcomeAlive {
		t.Fatalf("takeover by a replica with another overlap setting, while the owner holds its lease: %+v, want alive", r)
	}
	// The owner pauses past its TTL; its lease expires; the slot is taken over.
	lapse(t, rdb, s, "deploy", "lease")
	second := claimOne(t, s, check)
	if second.Outcome != slot.OutcomeWon || second.Attempt != 2 {
		t.Fatalf("takeover once the owner's lease is gone: %+v", second)
	}
	// The old owner wakes up and renews: even if it finds a lease of its own
	// token somewhere, the record is no longer its own.
	setLease(t, rdb, s, "deploy", "lease", first.Lease.Token(), "1700000520", "old", time.Minute)
	if errs := s.Renew(ctx, []slot.Lease{first.Lease}); !errors.Is(errs[0], slot.ErrLeaseLost) {
		t.Fatalf("old owner's renewal after the takeover: %v, want ErrLeaseLost", errs[0])
	}
	if cause := context.Cause(first.Lease.Context()); !errors.Is(cause, slot.ErrLeaseLost) {
		t.Fatalf("old owner's lease context: %v", cause)
	}
	// The new attempt holds the lease the record names (the job's), so it
	// renews once that lease holds its token again.
	setLease(t, rdb, s, "deploy", "lease", second.Lease.Token(), "1700000520", "new", time.Minute)
	if errs := s.Renew(ctx, []slot.Lease{second.Lease}); errs[0] != nil {
		t.Fatalf("attempt 2's renewal: %v", errs[0])
	}
}

// abandonLapsed lets the job's lease lapse, as its owner's death would, and
// has r2's takeover of the slot at at (on_owner_lost abandon) record it
// abandoned.
func abandonLapsed(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, at time.Time) {
	t.Helper()
	lapse(t, rdb, s, job, "lease")
	if r := claimOne(t, s, takeover(job, at, "r2", false, 1)); r.Outcome != slot.OutcomeAbandoned {
		t.Fatalf("takeover: %+v, want abandoned", r)
	}
}

// TestAbandonRaisesTheFence: abandoning a slot raises the job's fence and
// records it, so that the slot record's fence is no longer the zombie's: a
// store that checks it refuses the zombie's late write.
func TestAbandonRaisesTheFence(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_530, 0)
	first := claimOne(t, s, live("zombie", at, "dies"))
	abandonLapsed(t, rdb, s, "zombie", at)
	rec, _, _ := s.Record(ctx, "zombie", at)
	if rec.State != slot.StateAbandoned || rec.Fence <= first.Fence {
		t.Fatalf("abandoned record %+v; want a fence above the zombie's %d", rec, first.Fence)
	}
	next := claimOne(t, s, live("zombie", at.Add(time.Second), "r2"))
	if next.Fence <= rec.Fence {
		t.Fatalf("the next run's fence %d, not above the abandoning fence %d", next.Fence, rec.Fence)
	}
}

func TestSlotTakeoverAbandon(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_600, 0)
	dead := claimOne(t, s, live("once", at, "dies"))
	lapse(t, rdb, s, "once", "lease")
	to := takeover("once", at, "r2", false, 3)
	to.Token = "r2-takeover"
	r := claimOne(t, s, to)
	if r.Outcome != slot.OutcomeAbandoned || r.Holder != "dies" {
		t.Fatalf("%+v", r)
	}
	rec, _, _ := s.Record(ctx, "once", at)
	if rec.State != slot.StateAbandoned || rec.Attempt != 1 || rec.Error == "" {
		t.Fatalf("record %+v", rec)
	}
	// Sent again with its token (its reply was lost), the takeover is told
	// of its abandon again, to report it; another replica's finds the slot
	// closed; the dead run's finish is refused.
	if again := claimOne(t, s, to); again.Outcome != slot.OutcomeAbandoned || again.Fence != r.Fence || again.Holder != "dies" || again.Attempt != 1 {
		t.Fatalf("the takeover sent again: %+v; want %+v", again, r)
	}
	other := takeover("once", at, "r3", false, 3)
	other.Token = "r3-takeover"
	if r3 := claimOne(t, s, other); r3.Outcome != slot.OutcomeClosed || r3.State != slot.StateAbandoned {
		t.Fatalf("another replica's takeover: %+v; want closed", r3)
	}
	if errs := s.Renew(ctx, []slot.Lease{dead.Lease}); !errors.Is(errs[0], slot.ErrLeaseLost) || errors.Is(errs[0], slot.ErrDataLoss) {
		t.Fatalf("the dead run's renew: %v; want lease lost, not data loss", errs[0])
	}
	if err := finish(s, dead.Lease, slot.StateDone, ""); !errors.Is(err, slot.ErrNotHeld) || errors.Is(err, slot.ErrDataLoss) {
		t.Fatalf("the dead run's finish: %v; want ErrNotHeld, not data loss", err)
	}
	if rec2, _, _ := s.Record(ctx, "once", at); rec2 != rec {
		t.Fatalf("record %+v after the takeovers sent again and the dead run's finish; want it as it was, %+v", rec2, rec)
	}
	// Retry policy at the attempt limit abandons too.
	slot2 := at.Add(time.Second)
	claimOne(t, s, live("once", slot2, "dies"))
	lapse(t, rdb, s, "once", "lease")
	if r := claimOne(t, s, takeover("once", slot2, "r2", true, 1)); r.Outcome != slot.OutcomeAbandoned {
		t.Fatalf("retry at max_attempts 1: %+v", r)
	}
}

func TestSlotStatusQueries(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	base := time.Unix(1_700_000_700, 0)
	var last slot.Lease
	for i := range 12 {
		r := claimOne(t, s, live("status", base.Add(time.Duration(i)*time.Second), "r1"))
		if i < 11 {
			finish(s, r.Lease, slot.StateDone, "")
		} else {
			last = r.Lease
		}
	}
	recs, err := s.Records(ctx, "status", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 || !recs[0].Slot.Equal(base.Add(11*time.Second)) || recs[0].State != slot.StateRunning {
		t.Fatalf("%d records, newest %+v", len(recs), recs[0])
	}
	replica, at, ttl, err := s.Holder(ctx, "status")
	if err != nil || replica != "r1" || !at.Equal(base.Add(11*time.Second)) || ttl <= 0 {
		t.Fatalf("Holder = %s %v %v %v", replica, at, ttl, err)
	}
	states, err := s.JobStates(ctx, []string{"status", "never"})
	if st := states["status"]; err != nil || len(states) != 1 || !st.Last.Equal(base.Add(11*time.Second)) ||
		len(st.Running) != 1 || !st.Running[0].Equal(base.Add(11*time.Second)) {
		t.Fatalf("JobStates = %+v, %v; want the latest slot, running", states, err)
	}
	finish(s, last, slot.StateDone, "")
	if states, _ := s.JobStates(ctx, []string{"status"}); len(states["status"].Running) != 0 {
		t.Fatalf("JobStates after the finish = %+v, want no running slot", states)
	}
}

func TestSlotsOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	s, err := slotstore.New(c.Client(), "sc")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_800, 0)
	var claims []slot.Claim
	for i := range 12 { // jobs spread over the three masters
		claims = append(claims, live(fmt.Sprintf("job-%d", i), at, "r1"))
	}
	// Two slots of one job share a hash slot, and so a script call.
	overlapping := live("job-0", at.Add(time.Second), "r1")
	overlapping.AllowOverlap = true
	claims = append(claims, overlapping)
	res, err := s.Claim(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	var leases []slot.Lease
	for i, r := range res {
		if r.Err != nil || r.Outcome != slot.OutcomeWon {
			t.Fatalf("claim %d: %+v", i, r)
		}
		leases = append(leases, r.Lease)
	}
	for i, err := range s.Renew(ctx, leases) {
		if err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
	}
	// A backstop's look, across the masters: only the unclaimed slot is missing.
	looks := append(slices.Clone(claims[:12]), live("job-unclaimed", at, "r1"))
	if missing, err := s.Missing(ctx, refsOf(looks)); err != nil || !slices.Equal(missing, []int{12}) {
		t.Fatalf("Missing on cluster = %v, %v; want [12]", missing, err)
	}
	tk := takeover("job-0", at, "r2", true, 3)
	if r := claimOne(t, s, tk); r.Outcome != slot.OutcomeAlive {
		t.Fatalf("takeover on cluster: %+v", r)
	}
	for _, l := range leases {
		if err := finish(s, l, slot.StateDone, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Records(ctx, "job-3", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JobStates(ctx, []string{"job-1", "job-2"}); err != nil {
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
	s, _ := slotstore.New(wrappedClient{rdb}, srv.Key("wrapped"))
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil { // connection set up, scripts cached
		t.Fatal(err)
	}
	var claims []slot.Claim
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
		if r.Err != nil || r.Outcome != slot.OutcomeWon {
			t.Fatalf("claim %d: %+v", i, r)
		}
	}
	if last := res[10]; last.Outcome != slot.OutcomeLost || last.Holder != "r1" {
		t.Fatalf("second claim of w0 in the same batch: %+v", last)
	}
}

// TestScriptHeaders keeps every script documented.
func TestScriptHeaders(t *testing.T) {
	for _, p := range rediskit.ScriptHeaderProblems(os.DirFS("scripts")) {
		t.Error(p)
	}
}

// TestRunIDs: a won claim's run ID is the claim's, or a new UUIDv7; the
// record keeps it; a claim sent again after a lost reply gets the record's
// run ID back, whatever it carries; a takeover's attempt has its own, and
// the record names the attempt that ran last.
func TestRunIDs(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_002_000, 0)
	c := live("ids", at, "r1")
	c.Token, c.RunID = "tok-1", "0192f5e0-0000-7000-8000-000000000001"
	won := claimOne(t, s, c)
	if won.Outcome != slot.OutcomeWon || won.Lease.RunID() != c.RunID {
		t.Fatalf("claim: %+v, run ID %q", won, won.Lease.RunID())
	}
	again := c
	again.RunID = "0192f5e0-0000-7000-8000-000000000002" // a caller that made a new one: the record's stands
	if r := claimOne(t, s, again); r.Outcome != slot.OutcomeWon || r.Lease.RunID() != c.RunID {
		t.Fatalf("the same claim again: %+v, run ID %q, want %q", r, r.Lease.RunID(), c.RunID)
	}
	if rec, _, _ := s.Record(ctx, "ids", at); rec.RunID != c.RunID {
		t.Fatalf("record %+v, want run ID %q", rec, c.RunID)
	}

	// No run ID given: the store makes a UUIDv7.
	other := claimOne(t, s, live("ids2", at, "r1"))
	id, err := uuid.Parse(other.Lease.RunID())
	if err != nil || id.Version() != 7 {
		t.Fatalf("run ID %q (%v): want a UUIDv7", other.Lease.RunID(), err)
	}
	if rec, _, _ := s.Record(ctx, "ids2", at); rec.RunID != id.String() {
		t.Fatalf("record %+v, want run ID %s", rec, id)
	}

	// The owner's lease lapses; a takeover runs attempt 2 under its own ID.
	lapse(t, rdb, s, "ids2", "lease")
	second := claimOne(t, s, takeover("ids2", at, "r2", true, 3))
	if second.Outcome != slot.OutcomeWon || second.Lease.RunID() == "" || second.Lease.RunID() == id.String() {
		t.Fatalf("takeover: %+v, run ID %q (first %s)", second, second.Lease.RunID(), id)
	}
	if rec, _, _ := s.Record(ctx, "ids2", at); rec.RunID != second.Lease.RunID() || rec.Attempt != 2 {
		t.Fatalf("record %+v, want attempt 2's run ID %s", rec, second.Lease.RunID())
	}
}

// TestUnreplicatedWritesAreReported: with WithWaitReplicas on a Redis that
// has no replica, a won claim says Unreplicated, and a finish takes effect
// but returns ErrUnreplicated: a failover could lose either, and the caller
// must be able to say so.
func TestUnreplicatedWritesAreReported(t *testing.T) {
	srv := redistest.Start(t)
	s, err := slotstore.New(srv.Client(), srv.Key("unrepl"), slotstore.WithWaitReplicas(1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_003_000, 0)
	won := claimOne(t, s, live("j", at, "r1"))
	if won.Outcome != slot.OutcomeWon || !won.Unreplicated {
		t.Fatalf("claim %+v, want won and unreplicated", won)
	}
	err = finish(s, won.Lease, slot.StateDone, "")
	if !errors.Is(err, slot.ErrUnreplicated) || errors.Is(err, slot.ErrNotHeld) {
		t.Fatalf("finish: %v, want ErrUnreplicated", err)
	}
	if rec, ok, _ := s.Record(context.Background(), "j", at); !ok || rec.State != slot.StateDone {
		t.Fatalf("record %+v, want done", rec)
	}

	// A finish whose lease proves its record that Redis lost writes it anew:
	// the loss and the unacknowledged record written anew are both said
	// (before, only the loss: a failover could lose the record again with
	// nothing said).
	next := claimOne(t, s, live("j", at.Add(time.Second), "r1"))
	if err := srv.Client().Del(context.Background(), slotstore.RecordKey(s.Prefix(), "j", at.Add(time.Second))).Err(); err != nil {
		t.Fatal(err)
	}
	err = finish(s, next.Lease, slot.StateDone, "")
	if !errors.Is(err, slot.ErrDataLoss) || !errors.Is(err, slot.ErrUnreplicated) || errors.Is(err, slot.ErrNotHeld) {
		t.Fatalf("finish of a lost record: %v, want ErrDataLoss and ErrUnreplicated", err)
	}
	if rec, ok, _ := s.Record(context.Background(), "j", at.Add(time.Second)); !ok || rec.State != slot.StateDone {
		t.Fatalf("record written anew %+v, want done", rec)
	}
}

// TestMissWaitsForItsDeadline: a miss claim with a deadline (a starting
// replica's catch-up none, for a slot whose misfire grace may not have
// passed on Redis's clock) records nothing before the deadline, and answers
// early with the wait; a live claim of the slot meanwhile wins it, and the
// miss claim then loses to it. Past its deadline, a miss claim records the
// slot missed.
func TestMissWaitsForItsDeadline(t *testing.T) {
	_, _, s := newSlots(t)
	at := time.Now().Truncate(time.Second).Add(-2 * time.Second)
	miss := live("m", at, "starting")
	miss.Kind, miss.Reason, miss.Deadline = slot.ClaimMiss, "catchup none", time.Now().Add(time.Minute)
	if r := claimOne(t, s, miss); r.Outcome != slot.OutcomeEarly || r.Wait < 50*time.Second || r.Wait > time.Minute+time.Second {
		t.Fatalf("miss claim before its deadline: %+v; want early, about a minute to wait", r)
	}
	if rec, ok, err := s.Record(context.Background(), "m", at); err != nil || ok {
		t.Fatalf("a miss claim before its deadline recorded %+v (%v)", rec, err)
	}
	if r := claimOne(t, s, live("m", at, "lagging")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("a live claim within the grace, after the early miss claim: %+v; want won", r)
	}
	if r := claimOne(t, s, miss); r.Outcome != slot.OutcomeLost || r.Holder != "lagging" {
		t.Fatalf("miss claim of a running slot before its deadline: %+v; want lost to lagging", r)
	}
	old := live("m", at.Add(-time.Second), "starting")
	old.Kind, old.Reason, old.Deadline = slot.ClaimMiss, "catchup none", time.Now().Add(-time.Second)
	if r := claimOne(t, s, old); r.Outcome != slot.OutcomeMissed {
		t.Fatalf("miss claim past its deadline: %+v; want missed", r)
	}
	if rec, ok, _ := s.Record(context.Background(), "m", at.Add(-time.Second)); !ok || rec.State != slot.StateMissed || rec.Error != "catchup none" {
		t.Fatalf("record past the deadline: %+v (found %v); want missed, catchup none", rec, ok)
	}
}

// TestPause: while a job is paused, a live or catch-up claim records its
// slot paused, with who paused it and why, and nothing runs; a claim of
// mode miss still records missed; a run in progress is not touched. After
// Resume the next slot is won.
func TestPause(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_004_000, 0)
	running := claimOne(t, s, live("p", at, "r1"))
	if changed, _, err := s.Pause(ctx, "p", "migration", "ops@host"); err != nil || !changed {
		t.Fatalf("Pause = %v, %v", changed, err)
	}
	if changed, _, err := s.Pause(ctx, "p", "migration, day 2", "ops@host"); err != nil || changed {
		t.Fatalf("Pause again = %v, %v: want no change of state", changed, err)
	}
	pauses, err := s.Pauses(ctx, []string{"p", "other"})
	if err != nil || len(pauses) != 1 || pauses["p"].Note != "migration, day 2" || pauses["p"].By != "ops@host" || pauses["p"].At.IsZero() {
		t.Fatalf("Pauses = %+v, %v", pauses, err)
	}
	for i, kind := range []slot.Kind{slot.ClaimLive, slot.ClaimCatchup} {
		c := live("p", at.Add(time.Duration(i+1)*time.Second), "r2")
		c.Kind = kind
		r := claimOne(t, s, c)
		if r.Outcome != slot.OutcomePaused || r.Reason != "paused by ops@host: migration, day 2" {
			t.Fatalf("%s claim of a paused job: %+v", kind, r)
		}
		rec, ok, _ := s.Record(ctx, "p", c.Slot)
		if !ok || rec.State != slot.StatePaused || rec.Error != r.Reason || rec.RunID != "" {
			t.Fatalf("record %+v", rec)
		}
		if again := claimOne(t, s, live("p", c.Slot, "r3")); again.Outcome != slot.OutcomeLost || again.State != slot.StatePaused {
			t.Fatalf("another replica's claim of the paused slot: %+v", again)
		}
	}
	miss := live("p", at.Add(3*time.Second), "r2")
	miss.Kind, miss.Reason, miss.Deadline = slot.ClaimMiss, "catchup none", time.Time{} // no deadline: recorded at once
	if r := claimOne(t, s, miss); r.Outcome != slot.OutcomeMissed {
		t.Fatalf("miss claim of a paused job: %+v", r)
	}
	if err := finish(s, running.Lease, slot.StateDone, ""); err != nil {
		t.Fatalf("the run that started before the pause: %v", err)
	}
	if changed, err := s.Resume(ctx, "p"); err != nil || !changed {
		t.Fatalf("Resume = %v, %v", changed, err)
	}
	if changed, _ := s.Resume(ctx, "p"); changed {
		t.Fatal("Resume of a running job changed something")
	}
	if r := claimOne(t, s, live("p", at.Add(4*time.Second), "r2")); r.Outcome != slot.OutcomeWon {
		t.Fatalf("claim after Resume: %+v", r)
	}
}

// TestPauseBoundsNoteAndBy: every paused slot's record carries the pause's
// note and who paused, so Pause refuses either longer than slot.MaxNote
// bytes, and pauses nothing; a note of MaxNote bytes is taken.
func TestPauseBoundsNoteAndBy(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	long := strings.Repeat("n", slot.MaxNote+1)
	for name, args := range map[string][2]string{"note": {long, "ops@host"}, "by": {"migration", long}} {
		if _, _, err := s.Pause(ctx, "p", args[0], args[1]); err == nil || !strings.Contains(err.Error(), "1025 bytes, more than 1024") {
			t.Errorf("Pause with a %s of %d bytes: %v, want refused", name, len(long), err)
		}
	}
	if pauses, err := s.Pauses(ctx, []string{"p"}); err != nil || len(pauses) != 0 {
		t.Fatalf("after refused pauses: %d pauses (%v); want none", len(pauses), err)
	}
	note := strings.Repeat("n", slot.MaxNote)
	if changed, _, err := s.Pause(ctx, "p", note, "ops@host"); err != nil || !changed {
		t.Fatalf("Pause with a note of %d bytes = %v, %v", len(note), changed, err)
	}
	if pauses, err := s.Pauses(ctx, []string{"p"}); err != nil || pauses["p"].Note != note {
		t.Fatalf("Pauses = %d, %v; want the note of %d bytes", len(pauses["p"].Note), err, len(note))
	}
}

// TestFinishKnowsItsOwnRecord: a finish sent again after its reply was lost
// is answered as the same finish, while a finish of a slot that another
// replica has meanwhile recorded abandoned is refused, even when the run
// finishes abandoned too: that record is the other replica's, with its own
// fence and reason, and the run must not report it as its own.
func TestFinishKnowsItsOwnRecord(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_640, 0)

	won := claimOne(t, s, live("twice", at, "r1"))
	if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
		t.Fatal(err)
	}
	if err := finish(s, won.Lease, slot.StateDone, ""); err != nil {
		t.Fatalf("the same finish sent again: %v, want it answered as recorded", err)
	}

	slot2 := at.Add(time.Second)
	zombie := claimOne(t, s, live("twice", slot2, "r1"))
	abandonLapsed(t, rdb, s, "twice", slot2)
	theirs, _, _ := s.Record(ctx, "twice", slot2)
	err := finish(s, zombie.Lease, slot.StateAbandoned, "lease lost")
	if !errors.Is(err, slot.ErrNotHeld) {
		t.Fatalf("the zombie's finish, abandoned, after r2 recorded the slot abandoned: %v, want ErrNotHeld", err)
	}
	if rec, _, _ := s.Record(ctx, "twice", slot2); rec.Fence != theirs.Fence || rec.Error != theirs.Error || rec.Finished != theirs.Finished {
		t.Fatalf("the record changed under the refused finish: %+v, was %+v", rec, theirs)
	}
}

// TestAbandonFreesTheOwnersLease: a takeover that records a slot abandoned
// clears the dead owner's lapsed lease too, so that nothing later reads it
// as held: here Redis's clock steps back (a failover to a host that lags)
// and the stale lease's end is ahead of it again. The zombie's finish must
// still be refused, the abandoned record and its fence left as they are.
func TestAbandonFreesTheOwnersLease(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_700, 0)
	zombie := claimOne(t, s, live("stale", at, "dies"))
	abandonLapsed(t, rdb, s, "stale", at)
	abandoned, _, _ := s.Record(ctx, "stale", at)
	if v := rdb.HGet(ctx, stateKey(s, "stale"), "lease").Val(); v != "" {
		t.Errorf("the job's lease after the abandon: %q, want it free", v)
	}
	// Whatever is left there reads as the zombie's lease, held, once Redis's
	// clock is behind its end again.
	if v := rdb.HGet(ctx, stateKey(s, "stale"), "lease").Val(); v != "" {
		setLease(t, rdb, s, "stale", "lease", zombie.Lease.Token(), strconv.FormatInt(at.Unix(), 10), "dies", time.Minute)
	}
	if err := finish(s, zombie.Lease, slot.StateDone, ""); !errors.Is(err, slot.ErrNotHeld) {
		t.Errorf("the zombie's finish after the abandon: %v, want ErrNotHeld", err)
	}
	if rec, _, _ := s.Record(ctx, "stale", at); rec.State != slot.StateAbandoned || rec.Fence != abandoned.Fence {
		t.Fatalf("record after the zombie's finish: %+v, want it abandoned with fence %d", rec, abandoned.Fence)
	}
}

// TestScriptsRunOnRedis62: slotcron supports Redis 6.2, where SET takes NX
// or GET but not both (Redis 7.0 added that), and this machine's Redis is
// newer: a SET in a script that names both would pass every other test here
// and fail every claim on 6.2.
func TestScriptsRunOnRedis62(t *testing.T) {
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, "'SET'") && strings.Contains(line, "'NX'") && strings.Contains(line, "'GET'") {
				t.Errorf("%s:%d: SET with NX and GET needs Redis 7.0: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestRenewReportsALostState: the job's state (its lease, its running slots)
// gone while the record stays is data loss (a restart that kept part of the
// keys, an eviction), not a lease that ran out: the renewal says so, as it
// does when the record is gone.
func TestRenewReportsALostState(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	r := claimOne(t, s, live("forgot", time.Unix(1_700_000_800, 0), "r1"))
	if err := rdb.Del(ctx, stateKey(s, "forgot")).Err(); err != nil {
		t.Fatal(err)
	}
	errs := s.Renew(ctx, []slot.Lease{r.Lease})
	if !errors.Is(errs[0], slot.ErrLeaseLost) || !errors.Is(errs[0], slot.ErrDataLoss) {
		t.Fatalf("renew with the job's state gone: %v, want lease lost and data loss", errs[0])
	}
}

// TestARecordInPlaceOfALostOneIsDataLoss: Redis loses a running slot's
// record (a failover to a replica that lagged, a restart without
// persistence), and a claim makes the slot anew: another replica's run
// (the job's state lost too), or a skipped record (the state kept, its
// lease still the first run's). The first run's renewal and its finish
// find another run's record that no takeover of theirs wrote, and say it
// is data loss, not a takeover: the slot may have started twice.
func TestARecordInPlaceOfALostOneIsDataLoss(t *testing.T) {
	for _, keepState := range []bool{false, true} {
		t.Run(fmt.Sprintf("state kept %v", keepState), func(t *testing.T) {
			_, rdb, s := newSlots(t)
			ctx := context.Background()
			at := time.Unix(1_700_000_900, 0)
			first := claimOne(t, s, live("lost", at, "r1"))
			if first.Outcome != slot.OutcomeWon {
				t.Fatalf("first claim: %+v", first)
			}
			keys := []string{slotstore.RecordKey(s.Prefix(), "lost", at)}
			if !keepState {
				keys = append(keys, stateKey(s, "lost"))
			}
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			again := claimOne(t, s, live("lost", at, "r2"))
			want := slot.OutcomeWon
			if keepState {
				want = slot.OutcomeSkipped
			}
			if again.Outcome != want {
				t.Fatalf("the claim after the loss: %+v; want %s", again, want)
			}
			if keepState {
				checkStateKeptLoss(t, s, first.Lease, "lost", at)
				return
			}
			errs := s.Renew(ctx, []slot.Lease{first.Lease})
			if !errors.Is(errs[0], slot.ErrLeaseLost) || !errors.Is(errs[0], slot.ErrDataLoss) {
				t.Errorf("the first run's renewal: %v; want lease lost and data loss", errs[0])
			}
			err := finish(s, first.Lease, slot.StateDone, "")
			if !errors.Is(err, slot.ErrNotHeld) || !errors.Is(err, slot.ErrDataLoss) {
				t.Errorf("the first run's finish: %v; want not held and data loss", err)
			}
			rec, ok, err := s.Record(ctx, "lost", at)
			if err != nil || !ok || rec.Owner != "r2" || rec.State != slot.StateRunning {
				t.Errorf("record %+v (%v, %v); want r2's, running, unchanged by the first run's finish", rec, ok, err)
			}
		})
	}
}

// TestAFinishFindsItsRecordEvicted: a running slot's record alone lost
// (evicted) and no claim since: the run's finish, its lease proving the
// slot its own, records how it ended anew and says it is data loss.
func TestAFinishFindsItsRecordEvicted(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_001_000, 0)
	r := claimOne(t, s, live("evicted", at, "r1"))
	if err := rdb.Del(ctx, slotstore.RecordKey(s.Prefix(), "evicted", at)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := finish(s, r.Lease, slot.StateDone, ""); errors.Is(err, slot.ErrNotHeld) || !errors.Is(err, slot.ErrDataLoss) {
		t.Errorf("the finish: %v; want data loss, not not held", err)
	}
	if rec, ok, err := s.Record(ctx, "evicted", at); err != nil || !ok || rec.Owner != "r1" || rec.State != slot.StateDone {
		t.Errorf("record %+v (%v, %v); want r1's, done", rec, ok, err)
	}
	// The same finish sent again (its reply lost) says the loss too: before,
	// it found its own final record and answered done, and a loss whose
	// first word was lost was never reported.
	if err := finish(s, r.Lease, slot.StateDone, ""); errors.Is(err, slot.ErrNotHeld) || !errors.Is(err, slot.ErrDataLoss) {
		t.Errorf("the finish sent again: %v; want data loss, not not held", err)
	}
	// Another run of the job, whose record was not lost, finishes plainly.
	next := claimOne(t, s, live("evicted", at.Add(time.Second), "r1"))
	for range 2 { // and so does its finish sent again
		if err := finish(s, next.Lease, slot.StateDone, ""); err != nil {
			t.Errorf("the next run's finish: %v; want none", err)
		}
	}
}

// TestEachFinishSentAgainSaysItsRecordWasLost: two runs of a job (overlap
// allow) each find their record evicted, and their finishes go in one
// batch whose reply is lost; go-redis sends it again. The job's state kept
// the token of the last such run alone, so the first run's finish sent
// again found its own final record, no longer its token in the state, and
// answered plain success: its loss was never reported for it. Found by
// review.
func TestEachFinishSentAgainSaysItsRecordWasLost(t *testing.T) {
	_, rdb, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_002_000, 0)
	c := live("both-evicted", at, "r1")
	c.AllowOverlap = true
	a := claimOne(t, s, c)
	c.Slot = at.Add(time.Second)
	b := claimOne(t, s, c)
	for _, ts := range []time.Time{at, at.Add(time.Second)} {
		if err := rdb.Del(ctx, slotstore.RecordKey(s.Prefix(), "both-evicted", ts)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []slot.FinishRequest{{Lease: a.Lease, State: slot.StateDone}, {Lease: b.Lease, State: slot.StateDone}}
	for _, round := range []string{"the finish", "the finish sent again"} {
		for i, err := range s.Finish(ctx, reqs) {
			if errors.Is(err, slot.ErrNotHeld) || !errors.Is(err, slot.ErrDataLoss) {
				t.Errorf("%s of run %d: %v; want data loss, not not held", round, i, err)
			}
		}
	}
	// The state keeps the last 8 such runs' tokens, not every one.
	for i := 2; i < 12; i++ {
		c.Slot = at.Add(time.Duration(i) * time.Second)
		r := claimOne(t, s, c)
		if err := rdb.Del(ctx, slotstore.RecordKey(s.Prefix(), "both-evicted", c.Slot)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := finish(s, r.Lease, slot.StateDone, ""); !errors.Is(err, slot.ErrDataLoss) {
			t.Fatalf("run %d's finish: %v; want data loss", i, err)
		}
	}
	if gone := strings.Fields(rdb.HGet(ctx, stateKey(s, "both-evicted"), "gone").Val()); len(gone) != 8 {
		t.Errorf("the job's state keeps %d tokens of runs whose record was lost; want the last 8", len(gone))
	}
}

// checkStateKeptLoss: the slot's record alone lost (evicted: it has a TTL,
// the job's state none) and recorded skipped by a claim that found the
// job's lease held by the run of the slot itself. The run's renewal says
// it is data loss; its finish, its lease still proving the slot its own,
// records how the run ended over the skipped record (the run did start).
// It does not look at what it writes over (that would cost every finish a
// read): the renewal is what sees this loss.
func checkStateKeptLoss(t *testing.T, s *slotstore.Store, l slot.Lease, job string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	if errs := s.Renew(ctx, []slot.Lease{l}); !errors.Is(errs[0], slot.ErrLeaseLost) || !errors.Is(errs[0], slot.ErrDataLoss) {
		t.Errorf("the run's renewal: %v; want lease lost and data loss", errs[0])
	}
	if err := finish(s, l, slot.StateDone, ""); err != nil {
		t.Errorf("the run's finish: %v; want it recorded", err)
	}
	if rec, ok, err := s.Record(ctx, job, at); err != nil || !ok || rec.Owner != "r1" || rec.State != slot.StateDone {
		t.Errorf("record %+v (%v, %v); want r1's, done", rec, ok, err)
	}
}

// landingClaim is a go-redis hook that, just before the first pipeline that
// reads a record as a hash (HGETALL: protocol 1's), writes key as a
// protocol-2 record: a claim landing between Record's two reads.
type landingClaim struct {
	rdb  *redis.Client
	key  string
	done bool
}

func (h *landingClaim) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *landingClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *landingClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.done && len(cmds) > 0 && cmds[0].Name() == "hgetall" {
			h.done = true
			if err := h.rdb.Set(ctx, h.key, "running 1 1 0 0 0 job tok run 1 2:r20:0:0:0:", time.Hour).Err(); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// TestRecordWhileAClaimLands: Record reads a slot's record as a string,
// then, if there was none, as protocol 1's hash; a claim that writes the
// record in between is read as no record yet (as of the first read), not
// as an error.
func TestRecordWhileAClaimLands(t *testing.T) {
	srv, _, _ := newSlots(t)
	rdb := srv.Client()
	s, err := slotstore.New(rdb, srv.Key("landing"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_900, 0)
	rdb.AddHook(&landingClaim{rdb: srv.Client(), key: slotstore.RecordKey(s.Prefix(), "tick", at)})
	if _, ok, err := s.Record(context.Background(), "tick", at); err != nil || ok {
		t.Fatalf("Record while a claim lands: found %v, %v; want no record yet, no error", ok, err)
	}
}

// TestClaimsOfSeveralReplicasInOneBatch: one Claim may carry the claims of
// several replicas (a caller that claims for a pool of them). Each slot is
// recorded as its own claimant's, and each job's lease names it, though
// the claims share a round trip: the next slot's claim, skipped while the
// run holds the job, names the replica that holds it.
func TestClaimsOfSeveralReplicasInOneBatch(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	at := time.Unix(1_700_003_000, 0)
	claims := []slot.Claim{live("pool-a", at, "r1"), live("pool-b", at, "r2"), live("pool-c", at, "r1")}
	res, err := s.Claim(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range claims {
		if res[i].Err != nil || res[i].Outcome != slot.OutcomeWon {
			t.Fatalf("claim of %s by %s: %+v", c.Job, c.Replica, res[i])
		}
		rec, _, err := s.Record(ctx, c.Job, at)
		if err != nil || rec.Owner != c.Replica {
			t.Errorf("the record of %s (claimed by %s): %+v, %v; want it owned by %s", c.Job, c.Replica, rec, err, c.Replica)
		}
		next := claimOne(t, s, live(c.Job, at.Add(time.Second), "r3"))
		if next.Outcome != slot.OutcomeSkipped || next.Holder != c.Replica {
			t.Errorf("the next slot of %s, while %s's run holds it: %s, holder %q; want skipped, holder %s", c.Job, c.Replica, next.Outcome, next.Holder, c.Replica)
		}
	}
}

// TestWithWaitReplicasRefusesAWaitUnderAMillisecond: Redis's WAIT takes
// whole milliseconds, and WAIT n 0 waits forever: a timeout under 1ms would
// leave every batch unanswered with a replica down.
func TestWithWaitReplicasRefusesAWaitUnderAMillisecond(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // New sends nothing
	defer rdb.Close()
	for _, d := range []time.Duration{0, 500 * time.Microsecond, -time.Second} {
		if _, err := slotstore.New(rdb, "p", slotstore.WithWaitReplicas(1, d)); err == nil {
			t.Errorf("WithWaitReplicas(1, %v): no error", d)
		}
	}
	if _, err := slotstore.New(rdb, "p", slotstore.WithWaitReplicas(1, time.Millisecond)); err != nil {
		t.Errorf("WithWaitReplicas(1, 1ms): %v", err)
	}
}

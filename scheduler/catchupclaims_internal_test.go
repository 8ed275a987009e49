package scheduler

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// storeRunner returns the runner of a Scheduler of job, with max_skew 1s,
// on a real Redis, and its store. Nothing runs: the test drives the
// runner's parts, on the machine's clock, which is Redis's.
func storeRunner(t *testing.T, job Job) (*runner, *slotstore.Store) {
	t.Helper()
	r, store, _ := storeRunnerOn(t, job)
	return r, store
}

// storeRunnerOn is storeRunner, with the Redis it runs on.
func storeRunnerOn(t *testing.T, job Job) (*runner, *slotstore.Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	store, err := slotstore.New(srv.Client(), srv.Key("claims"))
	if err != nil {
		t.Fatal(err)
	}
	reg := jobs.NewRegistry()
	if err := reg.Register(job.Name, func(context.Context, jobs.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s, err := New(store, reg, WithJobs(job), WithReplicaID("r1"), WithKeyPrefix(store.Prefix()),
		WithSkewLimits(500*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return newRunner(s), store, srv
}

// TestACatchupClaimIsNeverEarly: a catch-up claim whose slot is still to
// come on Redis's clock (a plan made on a clock that was not Redis's: a
// probe that mis-measured it, a step) must not win it: it carries max_skew
// as its MaxEarly, so Redis refuses it and records nothing. The slot is
// then claimed live, at its time, as the replicas that planned right claim
// it (so it still ends with a record, even on a replica alone), and the
// next catch-up slot goes at once. Before, nothing bounded a catch-up
// claim: it won a slot an hour ahead, and its run started then.
func TestACatchupClaimIsNeverEarly(t *testing.T) {
	r, store := storeRunner(t, Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupAll})
	j := r.s.jobs[0]
	now := r.clock.Now()
	ahead := now.Add(time.Hour).Truncate(time.Second)
	p := &pending{due: now, job: j, claim: r.claim(slot.ClaimCatchup, j, ahead)}
	if p.claim.MaxEarly != time.Second {
		// (Not sent: it would win the slot, and run it.)
		t.Fatalf("a catch-up claim's MaxEarly is %v; want max_skew, 1s", p.claim.MaxEarly)
	}
	r.catchup[j] = []time.Time{ahead, ahead.Add(time.Second)} // the first in flight
	r.send(context.Background(), []*pending{p})

	if rec, ok, err := store.Record(context.Background(), "j", ahead); err != nil || ok {
		t.Fatalf("slot %v, an hour ahead: record %+v (found %v, %v); want none", ahead.UTC(), rec, ok, err)
	}
	var live, next int
	for _, q := range r.queue {
		switch c := q.p.claim; {
		case c.Kind == slot.ClaimLive && c.Slot.Equal(ahead) && q.due.Equal(ahead) && c.MaxEarly == time.Second:
			live++
		case c.Kind == slot.ClaimCatchup && c.Slot.Equal(ahead.Add(time.Second)) && !q.due.After(r.clock.Now()):
			next++
		default:
			t.Errorf("queued: %s claim of %v, due %v", c.Kind, c.Slot.UTC(), q.due.UTC())
		}
	}
	if live != 1 || next != 1 {
		t.Errorf("queued %d live claims of the slot at its time, %d of the next catch-up slot now; want 1 and 1", live, next)
	}
}

// TestAnOldCatchupClaimStillRuns: Redis refuses a catch-up claim with a
// MaxEarly whose slot is older than the retention less MaxEarly (what
// keeps a backfill from running a slot whose record may have expired). A
// starting replica's catch-up slot had no record when it was planned, and
// one written since has not expired: the bound that matters for it is the
// early one, and this answer shows its slot is past on Redis's clock. So it
// is claimed again at once without the bound, and runs, as it did before
// catch-up claims had one; it is not retried with the bound for ever.
func TestAnOldCatchupClaimStillRuns(t *testing.T) {
	r, store := storeRunner(t, Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupAll, Retention: time.Minute,
		CatchupWindow: 50 * time.Second, MisfireGrace: 10 * time.Second})
	runsWithoutLoop(t, r)

	j := r.s.jobs[0]
	now := r.clock.Now()
	// Planned just now: a record written since has not expired.
	r.planned = now
	old := now.Add(-59 * time.Second).Truncate(time.Second) // older than the retention (1m) less max_skew (1s)
	p := &pending{due: now, job: j, claim: r.claim(slot.ClaimCatchup, j, old)}
	r.send(context.Background(), []*pending{p})
	if rec, ok, err := store.Record(context.Background(), "j", old); err != nil || ok {
		t.Fatalf("slot %v: record %+v (found %v, %v); want none yet", old.UTC(), rec, ok, err)
	}
	if len(r.queue) != 1 || r.queue[0].p != p || p.claim.MaxEarly != 0 || r.queue[0].due.After(r.clock.Now()) || p.tries != 0 {
		t.Fatalf("queued %d, the claim %+v; want it again, now, without MaxEarly, not counted as a failed try", len(r.queue), p.claim)
	}
	r.send(context.Background(), []*pending{heap.Pop(&r.queue).(*pending)})
	r.jobsWG.Wait()
	rec, ok, err := store.Record(context.Background(), "j", old)
	if err != nil || !ok || rec.Owner != "r1" || rec.State != slot.StateDone {
		t.Errorf("slot %v, claimed again without MaxEarly: record %+v (found %v, %v); want done by r1", old.UTC(), rec, ok, err)
	}
}

// TestAStaleCatchupClaimDoesNotRunASlotTwice: a replica's catch-up is
// planned once, as it starts, from slots that had no record then. Should
// its catch-up reach a slot only a retention later (its clock was off and
// its catch-up claims waited; replicas of an older protocol barred it), a
// peer may have run that slot meanwhile, and its record expired: Redis
// answers old, and the claim must not be sent again without the bound. It
// is dropped, at ERROR and counted (past_retention), and the catch-up goes
// on. Before, it was sent again unbounded and won: the slot ran twice.
// The record's expiry is its key's deletion, at once: no test waits for
// Redis's TTL.
func TestAStaleCatchupClaimDoesNotRunASlotTwice(t *testing.T) {
	job := Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupAll, Retention: 3 * time.Second,
		CatchupWindow: 2 * time.Second, MisfireGrace: time.Second, LeaseTTL: 200 * time.Millisecond}
	r, store, srv := storeRunnerOn(t, job)
	runsWithoutLoop(t, r)
	j := r.s.jobs[0]
	now := r.clock.Now()
	// Planned 4s ago, more than the retention (3s) less twice max_skew
	// (1s): x had no record then, and is older than the retention less
	// max_skew on Redis's clock now.
	r.planned = now.Add(-4 * time.Second)
	x := now.Add(-5 * time.Second).Truncate(time.Second)
	r.catchup[j] = []time.Time{x}

	// A peer ran x (a catch-up claim of the version before the bound), and
	// its record has expired since.
	peer := claim(slot.ClaimCatchup, j.Job, x, "r2")
	res, err := store.Claim(context.Background(), []slot.Claim{peer})
	if err != nil || res[0].Outcome != slot.OutcomeWon {
		t.Fatalf("peer's claim: %+v, %v", res, err)
	}
	if errs := store.Finish(context.Background(), []slot.FinishRequest{{Lease: res[0].Lease, State: slot.StateDone}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := srv.Client().Del(context.Background(), slotstore.RecordKey(store.Prefix(), "j", x)).Err(); err != nil {
		t.Fatal(err)
	}

	p := &pending{due: now, job: j, claim: r.claim(slot.ClaimCatchup, j, x)}
	r.send(context.Background(), []*pending{p})
	for r.queue.Len() > 0 {
		if q := heap.Pop(&r.queue).(*pending); q.claim.Kind == slot.ClaimCatchup {
			r.send(context.Background(), []*pending{q})
		}
	}
	r.jobsWG.Wait()
	if rec, ok, err := store.Record(context.Background(), "j", x); err != nil || ok {
		t.Errorf("slot %v ran on r2, then on r1 once its record had expired (record %+v, found %v, %v): a stale catch-up claim was sent again without its bound", x.UTC(), rec, ok, err)
	}
	if len(r.catchup) != 0 {
		t.Errorf("the catch-up did not go on past the stale slot: %v", r.catchup)
	}
}

// TestAStopRecordsNoSlotBeforeItsTime: a replica that stops records the
// slots its catch-up policy left missed and that have no record yet, those
// still waiting for their misfire grace included (nobody else would). It
// must not record one before its time on Redis's clock: a slot still to
// come (a plan made on a clock that was not Redis's) is left to the
// replicas that claim it live. Before, the deadline was dropped at the
// stop, and such a slot was recorded missed ahead of time.
func TestAStopRecordsNoSlotBeforeItsTime(t *testing.T) {
	r, store := storeRunner(t, Job{Name: "j", Schedule: "@every 1s", Catchup: CatchupNone})
	j := r.s.jobs[0]
	now := r.clock.Now()
	past := now.Add(-5 * time.Second).Truncate(time.Second) // within its misfire grace (1m)
	ahead := now.Add(time.Hour).Truncate(time.Second)
	r.push(now.Add(time.Minute), j, r.claim(slot.ClaimMiss, j, past))
	r.push(now.Add(time.Minute), j, r.claim(slot.ClaimMiss, j, ahead))
	r.backlog[j] = &backlog{slots: []time.Time{past.Add(-time.Second), ahead.Add(time.Second)}}
	r.catchup[j] = []time.Time{past.Add(-2 * time.Second), ahead.Add(2 * time.Second)} // not reached when it stopped
	r.flushMisses(context.Background(), nil)
	for _, at := range []time.Time{past.Add(-2 * time.Second), past.Add(-time.Second), past} {
		if rec, ok, err := store.Record(context.Background(), "j", at); err != nil || !ok || rec.State != slot.StateMissed {
			t.Errorf("slot %v, past: record %+v (found %v, %v); want missed", at.UTC(), rec, ok, err)
		}
	}
	for _, at := range []time.Time{ahead, ahead.Add(time.Second), ahead.Add(2 * time.Second)} {
		if rec, ok, err := store.Record(context.Background(), "j", at); err != nil || ok {
			t.Errorf("slot %v, an hour ahead: record %+v (found %v, %v); want none", at.UTC(), rec, ok, err)
		}
	}
}

// runsWithoutLoop lets r start runs with no loop: the renewer and the
// finisher go until the end of the test, and a run's end goes nowhere.
func runsWithoutLoop(t *testing.T, r *runner) {
	bg, stop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); r.renew.loop(bg) }()
	go func() { defer loops.Done(); r.finisher.loop(bg) }()
	t.Cleanup(func() { stop(); loops.Wait() })
	close(r.loopDone)
}

// TestOutagesDoNotCrowdOutACatchup: after an outage, a table of 600 jobs,
// the last by name catchup all and the others catchup none, plans as
// startup does: each job's outage is in the view, and a heartbeat lists at
// most maxListedJobs (500). The catch-up job's range, which holds slots to
// run, must be in every one: a peer that stops gracefully would otherwise
// record them missed, and this replica, finding the records, would not run
// them. Before (found by a review), the heartbeat listed an arbitrary 500,
// and left it out of about one in six.
func TestOutagesDoNotCrowdOutACatchup(t *testing.T) {
	sched, err := ParseSchedule("@every 10s")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_000_000_000, 0)
	last := start.Add(-105 * time.Second)
	var v catchupView
	for i := range 600 {
		j := Job{Name: fmt.Sprintf("j%03d", i), Catchup: CatchupNone, CatchupWindow: 10 * time.Minute, Retention: time.Hour}
		if i == 599 { // last by name
			j.Catchup = CatchupAll
		}
		p := planStartup(j, sched, slot.JobState{Last: last}, start, 2*time.Second, olderLimit(600))
		if rg, ok := p.outage(); ok { // startup.go
			v.publish(j.Name, rg, len(p.run) > 0)
		}
	}
	missing := 0
	for range 30 { // 30 heartbeats
		if _, ok := v.snapshot()["j599"]; !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("the catch-up job's range was left out of %d of 30 heartbeats: %d jobs' outage ranges in the view (limit %d)",
			missing, len(v.all()), maxListedJobs)
	}
}

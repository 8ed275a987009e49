package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// olderReplica keeps a registry entry of a replica of slot protocol 1 (its
// description has no "protocol") fresh, as that replica's heartbeats would,
// until leave, which removes it as a replica that stops does.
func (h *harness) olderReplica(id string) (leave func()) {
	h.t.Helper()
	stop, stopped := make(chan struct{}), make(chan struct{})
	beat := func() {
		now, err := h.rdb.Time(context.Background()).Result()
		if err != nil {
			h.t.Error(err)
			return
		}
		desc := `{"version":"v0.9.0","started_ms":` + strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10) + `,"offset_ns":0,"table":"t"}`
		h.rdb.HSet(context.Background(), h.prefix+":replicas", id, "inst-"+id+" "+strconv.FormatInt(now.UnixMilli(), 10)+" "+desc)
	}
	beat()
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
				beat()
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
		h.rdb.HDel(context.Background(), h.prefix+":replicas", id)
	}
}

// TestOlderProtocolHoldsTheStart: an upgrade from slot protocol 1, whose
// replicas keep a record as a hash and the job's lease, fence, high-water
// mark and running set under keys of their own. While one of them is live
// the new replica claims nothing and reads nothing in, but has measured its
// clock (so that it reports ready); once it has left, the
// new replica takes in what it left (its running slot, whose lease lapsed
// when it died, is settled: abandoned), records the slots nobody ran while it
// waited (catchup last: the latest runs, and may hold the job through the
// next slot, which is then skipped), runs the next ones, with fences above
// protocol 1's, and every slot ends with a record.
func TestOlderProtocolHoldsTheStart(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		held := time.Now().Add(-3 * time.Second).Truncate(time.Second)
		fence := int64(1_700_000_000_000_000) // above the bubble's clock (2000), as a counter past it would be
		key := func(s string) string { return h.prefix + ":{j}:" + s }
		rec := key("slot:" + strconv.FormatInt(held.Unix(), 10))
		h.rdb.HSet(ctx, rec, "slot", held.Unix(), "owner", "old-1", "token", "t1", "attempt", 1, "fence", fence,
			"state", "running", "lease", "job", "started", held.UnixMilli(), "run_id", "run-1")
		h.rdb.PExpire(ctx, rec, time.Hour)
		h.rdb.Set(ctx, key("fence"), fence, 0)
		h.rdb.ZAdd(ctx, key("last"), redis.Z{Score: float64(held.Unix()), Member: "last"})
		h.rdb.ZAdd(ctx, key("running"), redis.Z{Score: float64(held.Unix()), Member: strconv.FormatInt(held.Unix(), 10)})
		leave := h.olderReplica("old-1")

		var buf lines
		r := h.start("new", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}),
			// A misfire grace of 2s: the wait's slots are recorded missed as
			// soon as it ends, their grace past on Redis's clock.
			[]scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 2 * time.Second, MisfireGrace: 2 * time.Second}},
			scheduler.WithHeartbeatEvery(time.Second),
			scheduler.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if s := h.starts("effects"); len(s) != 0 {
			t.Fatalf("%d runs while a replica of protocol 1 was live: %+v", len(s), s)
		}
		for at := held.Unix() + 1; at <= time.Now().Unix(); at++ {
			if r, ok := h.record("j", at); ok {
				t.Fatalf("slot %d recorded %s while a replica of protocol 1 was live", at, r.State)
			}
		}
		// It is ready all the same (the worker's /readyz asks for a measured
		// clock): a rolling update that waits for new pods to be ready
		// before it stops old ones would otherwise never end.
		if _, measured := r.s.Offset(); !measured {
			t.Fatal("while it waits for the older replica to leave, its clock offset is not measured: it would never be ready")
		}
		if typ := h.rdb.Type(ctx, rec).Val(); typ != "hash" {
			t.Fatalf("protocol 1's running record was touched (now a %s) while its replica was live", typ)
		}
		if !strings.Contains(strings.Join(buf.all(), "\n"), `level=ERROR msg="replicas of an older slot protocol are live (old-1)`) {
			t.Fatalf("no ERROR line about the older replica:\n%s", strings.Join(buf.all(), "\n"))
		}

		leave()
		gone := time.Now()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		end := time.Now()
		if r, ok := h.record("j", held.Unix()); !ok || r.State != slot.StateAbandoned || r.Owner != "old-1" || r.Fence <= fence {
			t.Fatalf("protocol 1's running slot, its owner gone: %+v (found %v), want abandoned with a fence above %d", r, ok, fence)
		}
		for _, s := range h.starts("effects") {
			if s.fence <= fence {
				t.Errorf("slot %d ran with fence %d, not above protocol 1's %d", s.slot, s.fence, fence)
			}
		}
		var missed, done, skipped int
		h.eachSlot("j", "effects", held.Unix()+1, end.Unix(), func(at int64, r slot.Record, starts int) {
			switch {
			case r.State == slot.StateMissed && starts == 0:
				missed++
			case r.State == slot.StateDone && starts == 1:
				done++
			case r.State == slot.StateSkipped && starts == 0: // the catch-up run still held the job
				skipped++
			default:
				t.Errorf("slot %d: record %+v, %d starts", at, r, starts)
			}
			if at > gone.Unix()+2 && (r.State != slot.StateDone || starts != 1) {
				t.Errorf("slot %d, after the start: %s with %d starts, want done once", at, r.State, starts)
			}
		})
		if missed == 0 || done < 2 || skipped > 1 {
			t.Fatalf("%d slots recorded missed, %d done and %d skipped; want the wait's slots missed and the later ones done", missed, done, skipped)
		}
		if n := h.rdb.ZCard(ctx, key("running")).Val(); n != 0 {
			t.Fatalf("protocol 1's running set still holds %d slots", n)
		}
	})
}

// TestOlderProtocolMidRun: a replica of slot protocol 1 comes back while the
// new one runs (a rollback, or a pod of the old version that was only
// stuck). From the new one's next heartbeat it claims nothing, and the slots
// it leaves end with a record all the same: missed once their misfire grace
// has passed, saying why. Once the older one has left, it reads in what that
// one left (a slot it ran, and died running, is settled: abandoned) and
// claims again.
func TestOlderProtocolMidRun(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start("new", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}),
			[]scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 2 * time.Second, MisfireGrace: 5 * time.Second}},
			scheduler.WithHeartbeatEvery(time.Second))
		time.Sleep(3 * time.Second)
		came := time.Now()
		leave := h.olderReplica("old-1")
		// It claims a slot as protocol 1 does, and dies mid-run.
		time.Sleep(2500 * time.Millisecond)
		theirs := came.Unix() + 3
		ref := strconv.FormatInt(theirs, 10)
		rec := h.prefix + ":{j}:slot:" + ref
		h.rdb.HSet(context.Background(), rec, "slot", theirs, "owner", "old-1", "token", "t1", "attempt", 1,
			"fence", time.Now().UnixMicro(), "state", "running", "lease", "job", "started", time.Now().UnixMilli(), "run_id", "run-1")
		h.rdb.PExpire(context.Background(), rec, time.Hour)
		h.rdb.ZAdd(context.Background(), h.prefix+":{j}:running", redis.Z{Score: float64(theirs), Member: ref})
		time.Sleep(3500 * time.Millisecond)
		leave()
		left := time.Now()
		time.Sleep(10 * time.Second) // the refused slots' grace, and the claims after it
		synctest.Wait()
		var refused int
		h.eachSlot("j", "effects", came.Unix()-2, left.Unix()+8, func(at int64, r slot.Record, starts int) {
			switch {
			case at == theirs: // settled once the new replica read in what protocol 1 left
				if starts != 0 || r.State != slot.StateAbandoned || r.Owner != "old-1" {
					t.Errorf("slot %d, run by protocol 1 whose replica died: %+v, %d starts; want abandoned", at, r, starts)
				}
			case at > came.Unix()+1 && at < left.Unix():
				if starts != 0 || r.State != slot.StateMissed || !strings.Contains(r.Error, "replicas of an older slot protocol were live (old-1)") {
					t.Errorf("slot %d, while protocol 1 was live: %+v, %d starts; want missed, saying why", at, r, starts)
				}
				refused++
			case at < came.Unix() || at > left.Unix()+2:
				if starts != 1 || r.State != slot.StateDone {
					t.Errorf("slot %d: %+v, %d starts; want done once", at, r, starts)
				}
			}
		})
		if refused < 3 {
			t.Fatalf("%d slots refused, want those of the 6s protocol 1 was live", refused)
		}
	})
}

// TestOlderProtocolFinishingRun: a replica of slot protocol 1 that stops
// leaves the registry first, then finishes its runs, renewing and recording
// them as protocol 1 does. The new replica, free to start once it has left,
// must leave such a run alone (its record stays a protocol-1 record, which
// its replica renews and finishes), and not run the job beside it (overlap
// skip: the run's lease holds the job until it ends); then run the job's
// slots as usual. The run's record ends as its own replica wrote it: done.
// The same holds when old-1's lease is much shorter than the new
// replica's (old-1 renews a 300 ms lease every 100 ms; the new replica,
// with a 3 s lease, reads the job's state again every second), so that the
// copy of it those reads keep in the job's state has lapsed by the next
// slot; and when, besides, once the new replica has started, it cannot read
// the job's state until old-1's run has ended.
func TestOlderProtocolFinishingRun(t *testing.T) {
	for _, tc := range []struct {
		name         string
		short, fails bool
	}{{"same lease", false, false}, {"short lease", true, false}, {"short lease, reads fail", true, true}} {
		t.Run(tc.name, func(t *testing.T) { olderProtocolFinishingRun(t, tc.short, tc.fails) })
	}
}

// failingStates is a store whose JobStates fails while failing is set.
type failingStates struct {
	*slotstore.Store
	failing *atomic.Bool
}

func (f failingStates) JobStates(ctx context.Context, jobs []string) (map[string]slot.JobState, error) {
	if f.failing.Load() {
		return nil, errors.New("failingStates: no answer")
	}
	return f.Store.JobStates(ctx, jobs)
}

func olderProtocolFinishingRun(t *testing.T, short, fails bool) {
	renew, ttl := time.Second, 3*time.Second // old-1's
	if short {
		renew, ttl = 100*time.Millisecond, 300*time.Millisecond
	}
	bubble(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		theirs := time.Now().Truncate(time.Second)
		ref := strconv.FormatInt(theirs.Unix(), 10)
		key := func(s string) string { return h.prefix + ":{j}:" + s }
		h.rdb.HSet(ctx, key("slot:"+ref), "slot", theirs.Unix(), "owner", "old-1", "token", "t1", "attempt", 1,
			"fence", theirs.UnixMicro(), "state", "running", "lease", "job", "started", theirs.UnixMilli(), "run_id", "run-1")
		h.rdb.PExpire(ctx, key("slot:"+ref), time.Hour)
		h.rdb.Set(ctx, key("lease"), "t1 "+ref+" old-1", ttl)
		h.rdb.ZAdd(ctx, key("running"), redis.Z{Score: float64(theirs.Unix()), Member: ref})
		h.rdb.ZAdd(ctx, key("last"), redis.Z{Score: float64(theirs.Unix()), Member: "last"})
		leave := h.olderReplica("old-1")
		finished := make(chan struct{})
		var doneAt time.Time
		go func() { // old-1's run: renewed, done after 7s
			defer close(finished)
			for end := theirs.Add(7 * time.Second); time.Now().Before(end); {
				time.Sleep(renew)
				h.rdb.PExpire(ctx, key("lease"), ttl)
			}
			doneAt = time.Now()
			h.rdb.HSet(ctx, key("slot:"+ref), "state", "done", "finished", doneAt.UnixMilli())
			h.rdb.Del(ctx, key("lease"))
			h.rdb.ZRem(ctx, key("running"), ref)
		}()
		var failing atomic.Bool
		h.startWith("new", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { return failingStates{s, &failing} }},
			registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}),
			[]scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 3 * time.Second, MisfireGrace: 2 * time.Second}},
			scheduler.WithHeartbeatEvery(time.Second))
		time.Sleep(2 * time.Second)
		leave()                             // it stops: out of the registry, its run goes on
		time.Sleep(1500 * time.Millisecond) // the new replica has started, having read old-1's run
		failing.Store(fails)
		<-finished
		failing.Store(false)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		end := time.Now()
		if typ := h.rdb.Type(ctx, key("slot:"+ref)).Val(); typ != "hash" {
			t.Fatalf("old-1's record is a %s: it was taken from the replica finishing it", typ)
		}
		if r, ok := h.record("j", theirs.Unix()); !ok || r.State != slot.StateDone || r.Owner != "old-1" {
			t.Fatalf("old-1's run: %+v (found %v), want done, as old-1 recorded it", r, ok)
		}
		for _, s := range h.starts("effects") {
			if r, _ := h.record("j", s.slot); r.Started.Before(doneAt) {
				t.Errorf("slot %d started at %v, beside old-1's run, which held the job until %v", s.slot, r.Started, doneAt)
			}
		}
		h.eachSlot("j", "effects", theirs.Unix()+1, end.Unix(), func(at int64, r slot.Record, starts int) {
			if at > theirs.Unix()+9 && (r.State != slot.StateDone || starts != 1) {
				t.Errorf("slot %d, after old-1's run: %+v, %d starts; want done once", at, r, starts)
			}
		})
	})
}

// expireCounter counts the calls of Claim that carry expire claims, and
// those claims.
type expireCounter struct {
	*slotstore.Store
	calls, claims *atomic.Int64
}

func (e expireCounter) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	n := 0
	for _, c := range claims {
		if c.Kind == slot.ClaimExpire {
			n++
		}
	}
	if n > 0 {
		e.calls.Add(1)
		e.claims.Add(int64(n))
	}
	return e.Store.Claim(ctx, claims)
}

// TestOlderProtocolRefusalsShareRoundTrips: while a replica of an older
// protocol is live, the new one refuses every live slot of its five jobs
// and sends each as an expire claim at its deadline; the five jobs' slots
// share their deadlines, and their expire claims share a round trip.
func TestOlderProtocolRefusalsShareRoundTrips(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var calls, claims atomic.Int64
		fns := map[string]jobs.Func{}
		var table []scheduler.Job
		for i := range 5 {
			name := "j" + strconv.Itoa(i)
			fns[name] = recorder(h.rdb, "effects", 10*time.Millisecond)
			table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s", MisfireGrace: 2 * time.Second})
		}
		h.startWith("new", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { return expireCounter{s, &calls, &claims} }},
			registry(t, fns), table, scheduler.WithHeartbeatEvery(time.Second))
		time.Sleep(2 * time.Second)
		leave := h.olderReplica("old-1")
		time.Sleep(8 * time.Second)
		leave()
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n, c := claims.Load(), calls.Load(); n < 5*4 || c*5 != n {
			t.Fatalf("%d expire claims in %d calls of Claim; want at least 20, five to a call", n, c)
		}
	})
}

// TestOlderProtocolComesBack: while old-1 finishes a run after it left, the
// new replica reads the job's state again and again (its copy of old-1's
// lease). When a replica of protocol 1 is live again (a rollback: old-2),
// those reads stop as the first read waits: they would convert protocol
// 1's records under a replica that keeps them, here a running slot whose
// replica died, which old-2 is the one to settle.
func TestOlderProtocolComesBack(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		theirs := time.Now().Truncate(time.Second)
		key := func(s string) string { return h.prefix + ":{j}:" + s }
		running := func(at time.Time, owner, token string) {
			ref := strconv.FormatInt(at.Unix(), 10)
			h.rdb.HSet(ctx, key("slot:"+ref), "slot", at.Unix(), "owner", owner, "token", token, "attempt", 1,
				"fence", at.UnixMicro(), "state", "running", "lease", "job", "started", at.UnixMilli(), "run_id", "run-"+token)
			h.rdb.PExpire(ctx, key("slot:"+ref), time.Hour)
			h.rdb.ZAdd(ctx, key("running"), redis.Z{Score: float64(at.Unix()), Member: ref})
		}
		running(theirs, "old-1", "t1")
		h.rdb.Set(ctx, key("lease"), "t1 "+strconv.FormatInt(theirs.Unix(), 10)+" old-1", 3*time.Second)
		leave1 := h.olderReplica("old-1")
		done := make(chan struct{})
		go func() { // old-1's run, renewed for 10 s
			defer close(done)
			for end := theirs.Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
				h.rdb.PExpire(ctx, key("lease"), 3*time.Second)
			}
		}()
		h.start("new", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}),
			[]scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 3 * time.Second}},
			scheduler.WithHeartbeatEvery(time.Second))
		time.Sleep(2 * time.Second)
		leave1()
		time.Sleep(2 * time.Second) // the new replica has started, and reads old-1's run again every second
		leave2 := h.olderReplica("old-2")
		time.Sleep(1500 * time.Millisecond) // the new replica has seen old-2 in the registry
		dead := theirs.Add(-time.Minute)
		running(dead, "old-3", "t3") // a slot of a replica of protocol 1 that died, no lease left
		time.Sleep(4 * time.Second)
		if typ := h.rdb.Type(ctx, key("slot:"+strconv.FormatInt(dead.Unix(), 10))).Val(); typ != "hash" {
			t.Errorf("a protocol-1 record, while old-2 is live: now a %s, read in under a replica of protocol 1", typ)
		}
		leave2()
		<-done
	})
}

// TestOlderProtocolDepartureConvertsNothing: while a replica of protocol 1
// is live (a rollback), a new replica that leaves the registry makes the
// other new one read which slots run, to watch those the one that left may
// have been watching. That read must leave protocol 1's records alone:
// reading them in (JobStates) would take a running slot from under the
// replicas that own it.
func TestOlderProtocolDepartureConvertsNothing(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		table := []scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 3 * time.Second}}
		h.start("n1", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}), table,
			scheduler.WithHeartbeatEvery(time.Second))
		n2 := h.start("n2", registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}), table,
			scheduler.WithHeartbeatEvery(time.Second))
		time.Sleep(3 * time.Second)
		leave := h.olderReplica("old-1")
		time.Sleep(1500 * time.Millisecond) // both new replicas have seen it
		dead := time.Now().Truncate(time.Second).Add(-time.Minute)
		ref := strconv.FormatInt(dead.Unix(), 10)
		rec := h.prefix + ":{j}:slot:" + ref
		h.rdb.HSet(ctx, rec, "slot", dead.Unix(), "owner", "old-1", "token", "t1", "attempt", 1,
			"fence", dead.UnixMicro(), "state", "running", "lease", "job", "started", dead.UnixMilli(), "run_id", "run-t1")
		h.rdb.PExpire(ctx, rec, time.Hour)
		h.rdb.ZAdd(ctx, h.prefix+":{j}:running", redis.Z{Score: float64(dead.Unix()), Member: ref})
		n2.stop()
		time.Sleep(5 * time.Second) // n1 has seen n2 leave, and read again
		if typ := h.rdb.Type(ctx, rec).Val(); typ != "hash" {
			t.Errorf("protocol 1's running record, while old-1 is live and after n2 left: now a %s, read in", typ)
		}
		if n := h.rdb.ZCard(ctx, h.prefix+":{j}:running").Val(); n != 1 {
			t.Errorf("protocol 1's running set holds %d slots after n2 left, want 1", n)
		}
		leave()
	})
}

// loseWhile executes every claim, and loses every reply, while lose is
// set (nil: always); while down is set, it executes none (Redis is away).
type loseWhile struct {
	*slotstore.Store
	lose, down *atomic.Bool
}

func (d loseWhile) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	var res []slot.Result
	if d.down == nil || !d.down.Load() {
		var err error
		if res, err = d.Store.Claim(ctx, claims); err != nil || d.lose != nil && !d.lose.Load() {
			return res, err
		}
	}
	out := make([]slot.Result, len(claims))
	for i := range out {
		out[i] = slot.Result{Err: errors.New("loseWhile: i/o timeout (the reply was lost)"), Wait: -1}
	}
	return out, nil
}

// TestLostReplyWhileRefusing: a claim wins a slot, but its reply is lost,
// and so are those of its retries until the replica starts refusing to
// claim (a replica of an older protocol came back). While it refuses, it
// sends its live claims as expire claims, which record the slot missed if
// nobody ran it. The claim that won must still be recognised as the claim
// (its token) and its slot run once, not taken for a record of this
// replica's with no run behind it, and abandoned.
func TestLostReplyWhileRefusing(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var lose atomic.Bool
		h.startWith("new", replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer { return loseWhile{Store: s, lose: &lose} }},
			registry(t, map[string]jobs.Func{"j": recorder(h.rdb, "effects", 10*time.Millisecond)}),
			[]scheduler.Job{{Name: "j", Schedule: "@every 1s", LeaseTTL: 2 * time.Second, MisfireGrace: 5 * time.Second}},
			scheduler.WithHeartbeatEvery(time.Second))
		sleepUntil(nextSecond(0).Add(2500 * time.Millisecond))
		won := nextSecond(0) // claimed a few ms before its time, and won
		sleepUntil(won.Add(-100 * time.Millisecond))
		lose.Store(true)
		sleepUntil(won.Add(100 * time.Millisecond))
		if rec, _ := h.record("j", won.Unix()); rec.State != slot.StateRunning || rec.Owner != "new" {
			t.Fatalf("slot %v: %s by %q; want running by new (its claim won, the reply lost): the test shows nothing", won.UTC(), rec.State, rec.Owner)
		}
		leave := h.olderReplica("old-1")
		time.Sleep(2500 * time.Millisecond) // its heartbeat finds old-1: it refuses
		lose.Store(false)
		time.Sleep(3 * time.Second)
		leave()
		left := time.Now()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		h.eachSlot("j", "effects", won.Unix()-2, left.Unix()+8, func(at int64, r slot.Record, starts int) {
			switch {
			case at == won.Unix():
				if starts != 1 || r.State != slot.StateDone {
					t.Errorf("slot %d, won with its reply lost: %s %q, %d starts; want done once", at, r.State, r.Error, starts)
				}
			case r.State == slot.StateMissed:
				if starts != 0 || !strings.Contains(r.Error, "replicas of an older slot protocol were live (old-1)") {
					t.Errorf("slot %d: %+v, %d starts; want missed while old-1 was live", at, r, starts)
				}
			default:
				if starts != 1 || r.State != slot.StateDone {
					t.Errorf("slot %d: %s %q, %d starts; want done once, or missed while old-1 was live", at, r.State, r.Error, starts)
				}
			}
		})
	})
}

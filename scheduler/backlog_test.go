package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// gatedStore holds a replica at its read of the jobs' states until the
// test opens states (after the replica has registered), at its reads of
// records until it opens peek, and at its claims of batches that carry a
// miss claim until it opens claim; and counts, across the replicas that
// share its counter, the miss claims that reach Redis's claim script.
type gatedStore struct {
	*slotstore.Store
	states, peek, claim chan struct{}
	// read is where a read of the jobs' states waits once it has its
	// answer: shared, so that every replica has planned from the same
	// states before one claims a live slot (which moves them on).
	read   chan struct{}
	misses *atomic.Int64
	// hold, once set, is one more gate that miss claims wait at.
	hold atomic.Pointer[chan struct{}]
}

func wait(ctx context.Context, gate chan struct{}) error {
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedStore) JobStates(ctx context.Context, names []string) (map[string]slot.JobState, error) {
	if err := wait(ctx, g.states); err != nil {
		return nil, err
	}
	states, err := g.Store.JobStates(ctx, names)
	if err == nil {
		err = wait(ctx, g.read)
	}
	return states, err
}

func (g *gatedStore) Claim(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	n := 0
	for _, c := range claims {
		if c.Kind == slot.ClaimMiss {
			n++
		}
	}
	if n == 0 {
		return g.Store.Claim(ctx, claims)
	}
	err := wait(ctx, g.claim)
	if hold := g.hold.Load(); err == nil && hold != nil {
		err = wait(ctx, *hold)
	}
	if err != nil { // as the store answers a batch that Redis did not
		res := make([]slot.Result, len(claims))
		for i := range res {
			res[i].Err = err
		}
		return res, nil
	}
	g.misses.Add(int64(n))
	return g.Store.Claim(ctx, claims)
}

func (g *gatedStore) Peek(ctx context.Context, claims []slot.Claim) ([]slot.Record, error) {
	if err := wait(ctx, g.peek); err != nil {
		return nil, err
	}
	return g.Store.Peek(ctx, claims)
}

// open opens gates.
func open(gates ...chan struct{}) {
	for _, g := range gates {
		close(g)
	}
}

// outageDown is how long, in seconds, every replica was down in the
// outage tests.
const outageDown = 60

// outage runs a table of the jobs names, each due every second (catchup:
// none; each records its starts in "starts"), on one replica for a few
// slots, and stops it. It returns the table, its registry, and the last
// slot that ran, once outageDown seconds and a half have passed since.
func outage(t *testing.T, h *harness, names ...string) ([]scheduler.Job, func() *jobs.Registry, int64) {
	t.Helper()
	var table []scheduler.Job
	for _, name := range names {
		table = append(table, scheduler.Job{Name: name, Schedule: "@every 1s", Catchup: scheduler.CatchupNone,
			MisfireGrace: 2 * time.Second, LeaseTTL: time.Second})
	}
	reg := func() *jobs.Registry {
		fns := map[string]jobs.Func{}
		for _, name := range names {
			fns[name] = recorder(h.rdb, "starts", 0)
		}
		return registry(t, fns)
	}
	last := h.ranThenStopped("first", reg(), table, 3500*time.Millisecond)
	sleepUntil(time.Unix(last+outageDown, 0).Add(500 * time.Millisecond))
	return table, reg, last
}

// missedTo is the end (exclusive) of the slots that replicas starting
// half a second after the slot outageDown seconds after last plan to
// record missed: the slots up to max_skew before their start are claimed
// live.
func missedTo(last int64) int64 {
	return time.Unix(last+outageDown, 0).Add(500*time.Millisecond-scheduler.DefaultMaxSkew).Unix() + 1
}

// allMissed fails t unless every slot of job in [from, to) is recorded
// missed, and never started (the jobs record their starts in "starts").
func allMissed(t *testing.T, h *harness, job string, from, to int64) {
	t.Helper()
	h.eachSlot(job, "starts", from, to, func(at int64, r slot.Record, starts int) {
		if r.State != slot.StateMissed || starts != 0 {
			t.Errorf("%s slot %s: %s, %d starts; want missed", job, clockOf(at), r.State, starts)
		}
	})
}

// startGated starts replicas ids in turn, each once the one before has
// registered and waits at its read of the jobs' states (so each knows of
// those before it, as replicas that start a moment apart do), then lets
// them all read the states, and go on once all have (so they plan the same
// slots), and returns them, and their stores, whose reads of records and
// miss claims wait.
func startGated(h *harness, ids []string, reg func() *jobs.Registry, table []scheduler.Job, misses *atomic.Int64) (map[string]*replica, map[string]*gatedStore) {
	reps, gates := map[string]*replica{}, map[string]*gatedStore{}
	read := make(chan struct{})
	for _, id := range ids {
		g := &gatedStore{states: make(chan struct{}), read: read, peek: make(chan struct{}), claim: make(chan struct{}), misses: misses}
		gates[id] = g
		reps[id] = h.startWith(id, replicaOpts{claimer: func(s *slotstore.Store) scheduler.Claimer {
			g.Store = s
			return g
		}}, reg(), table)
		synctest.Wait()
	}
	for _, g := range gates {
		open(g.states)
	}
	synctest.Wait() // each has read the same states
	open(read)
	synctest.Wait() // each has planned, and waits to read its first records
	return reps, gates
}

// Replicas that start together after an outage all plan the same slots to
// record missed. Each sends first the slots it is the preferred replica of,
// and reads the records of the rest before claiming them: Redis gets one
// miss claim a slot, where it used to get one a slot from each replica.
// The replicas register in turn (so, as it registers, the last knows of
// all, the first of none), read the jobs' states together, read the
// records of their own shares together (finding none), then claim
// together: the first learns of the others from the registry it reads
// again once it has planned, or it would claim every slot.
func TestAnOutageIsRecordedOnceByReplicasThatStartTogether(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table, reg, last := outage(t, h, "j", "k")
		var misses atomic.Int64
		_, gates := startGated(h, []string{"a", "b", "c"}, reg, table, &misses)
		for _, g := range gates {
			open(g.peek)
		}
		synctest.Wait() // each has read the records of its own share, and waits to claim them
		for _, g := range gates {
			open(g.claim)
		}
		synctest.Wait()             // each has sent its own share; the rest wait for the backstop's delay
		time.Sleep(5 * time.Second) // past the backstop's delay: the postponed slots are read
		end := missedTo(last)
		planned := 2 * (end - 1 - last)
		for _, job := range []string{"j", "k"} {
			allMissed(t, h, job, last+1, end)
		}
		if n := misses.Load(); n != planned {
			t.Errorf("Redis got %d miss claims from 3 replicas for %d slots missed in the outage; want one a slot", n, planned)
		}
	})
}

// A replica that registered, and so is some slots' preferred replica in
// its peers' eyes, but never sends its share (it hangs as it starts) costs
// those slots a backstop's delay, not their records: its peers read them
// and claim them.
func TestAnOutageIsRecordedWhenAPreferredReplicaNeverSendsItsShare(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table, reg, last := outage(t, h, "j")
		var misses atomic.Int64
		_, gates := startGated(h, []string{"hung", "a", "b"}, reg, table, &misses)
		for _, id := range []string{"a", "b"} { // hung never gets further, nor leaves the registry
			open(gates[id].peek, gates[id].claim)
			synctest.Wait()
		}
		// From here on, a's and b's miss claims wait until both have read
		// the records of the slots they claim first of hung's share: were
		// they the same slots, both would claim them.
		hold := make(chan struct{})
		gates["a"].hold.Store(&hold)
		gates["b"].hold.Store(&hold)
		end := missedTo(last)
		missing := 0
		for at := last + 1; at < end; at++ {
			if _, ok := h.record("j", at); !ok {
				missing++
			}
		}
		if missing == 0 {
			t.Fatalf("every slot was recorded before the backstop's delay: none was left to the hung replica, so this test shows nothing")
		}
		t.Logf("%d of %d slots left to the hung replica", missing, end-1-last)
		time.Sleep(scheduler.BackstopAfter + 100*time.Millisecond) // a's and b's first later slots read, their claims held
		synctest.Wait()
		open(hold)
		time.Sleep(5 * time.Second)
		allMissed(t, h, "j", last+1, end)
		// Once a slot, those left to the hung replica too: the next in
		// line for each claims it, and the other reads it a delay later.
		if n, slots := misses.Load(), end-1-last; n != slots {
			t.Errorf("Redis got %d miss claims for %d slots, %d of them left to the hung replica; want one a slot", n, slots, missing)
		}
	})
}

// A replica that stops while the claims of its outage's slots are in
// flight records them as it stops: the claims cut off by the stop are no
// longer in its backlog, and used to be dropped, leaving those slots with
// no record.
func TestAStopRecordsTheOutageSlotsItsClaimsCarried(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		table, reg, last := outage(t, h, "j")
		var misses atomic.Int64
		reps, gates := startGated(h, []string{"a"}, reg, table, &misses)
		open(gates["a"].peek)
		synctest.Wait() // its miss claims in flight
		done := make(chan struct{})
		go func() { reps["a"].stop(); close(done) }()
		synctest.Wait() // the claims in flight cut off; the stop's own wait at the gate
		open(gates["a"].claim)
		<-done
		end := missedTo(last)
		allMissed(t, h, "j", last+1, end)
	})
}

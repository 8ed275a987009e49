package scheduler

import (
	"container/heap"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/locking"
)

// maxBatch bounds one batch of claims; a larger backlog goes out over several
// ticks.
const maxBatch = 5000

// coalesce is how early a takeover check may go out to share a round trip
// with claims due now; checking early only answers "alive".
const coalesce = 100 * time.Millisecond

// pending is a claim that is due at a time: a retry, a catch-up, or a watch
// on a slot whose owner may die.
type pending struct {
	due   time.Time
	job   *jobState
	claim locking.SlotClaim
	tries int
}

type pendingQueue []*pending

func (q pendingQueue) Len() int           { return len(q) }
func (q pendingQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q pendingQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pendingQueue) Push(x any)        { *q = append(*q, x.(*pending)) }
func (q *pendingQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	*q = old[:len(old)-1]
	return p
}

type slotKey struct {
	job  string
	slot int64
}

// runner is one Run of a Scheduler. The loop goroutine owns every field but
// the ones under mu; run goroutines hand it work with post.
type runner struct {
	s     *Scheduler
	clock Clock
	log   *slog.Logger

	next     map[*jobState]time.Time   // the next live slot
	queue    pendingQueue              // retries, catch-ups, watches
	catchup  map[*jobState][]time.Time // catch-up slots after the one in flight
	watching map[slotKey]bool

	mu    sync.Mutex
	posts []func()
	wake  chan struct{} // 1-buffered: "posts are waiting"

	jobsWG   sync.WaitGroup
	killCtx  context.Context // cancelled when the shutdown grace has passed
	kill     context.CancelFunc
	renew    *renewer
	finisher *finisher
}

func newRunner(s *Scheduler) *runner {
	killCtx, kill := context.WithCancel(context.Background())
	return &runner{
		s:        s,
		clock:    s.cfg.clock,
		log:      s.log.With("slotcron.replica", s.cfg.replica),
		next:     map[*jobState]time.Time{},
		catchup:  map[*jobState][]time.Time{},
		watching: map[slotKey]bool{},
		wake:     make(chan struct{}, 1),
		killCtx:  killCtx,
		kill:     kill,
		renew:    newRenewer(s),
		finisher: newFinisher(s),
	}
}

// post hands f to the loop goroutine, which runs it before its next dispatch.
func (r *runner) post(f func()) {
	r.mu.Lock()
	r.posts = append(r.posts, f)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runner) runPosts() {
	r.mu.Lock()
	posts := r.posts
	r.posts = nil
	r.mu.Unlock()
	for _, f := range posts {
		f()
	}
}

func (r *runner) run(ctx context.Context) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); r.renew.loop(bg) }()
	go func() { defer bgWG.Done(); r.finisher.loop(bg) }()

	if r.startup(ctx) {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); r.s.clockLoop(ctx) }()
		r.loop(ctx)
	}
	r.drain()
	stopBG()
	bgWG.Wait()
	r.kill()
	r.log.Info("scheduler stopped")
	return nil
}

// startup readies the protocol, measures the clock and plans every job,
// retrying until Redis answers; false when ctx ended first.
func (r *runner) startup(ctx context.Context) bool {
	var last map[string]time.Time
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"load scripts", r.s.claimer.Prepare},
		{"measure the clock against Redis", r.s.measureOffset},
		{"read the latest slots", func(ctx context.Context) (err error) {
			last, err = r.s.claimer.LastSlots(ctx, r.s.jobNames())
			return err
		}},
	}
	for _, st := range steps {
		for tries := 0; ; tries++ {
			sctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
			err := st.do(sctx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return false
			}
			r.log.Error("scheduler start: cannot "+st.what+"; retrying", "error", err)
			if !r.sleep(ctx, backoff(tries)) {
				return false
			}
		}
	}
	start := r.clock.Now()
	for _, j := range r.s.jobs {
		p := planStartup(j.Job, j.sched, last[j.Name], start, r.s.cfg.maxSkew)
		r.next[j] = p.live
		if !p.check.IsZero() {
			r.push(start, j, claim(locking.ClaimTakeover, j.Job, p.check, r.s.cfg.replica))
		}
		for _, slot := range p.miss {
			r.push(start, j, claim(locking.ClaimMiss, j.Job, slot, r.s.cfg.replica))
		}
		if len(p.run) > 0 {
			r.catchup[j] = p.run[1:]
			r.push(start, j, claim(locking.ClaimCatchup, j.Job, p.run[0], r.s.cfg.replica))
		}
		if len(p.miss)+len(p.run) > 0 {
			r.log.Info("catching up", "slotcron.job", j.Name, "catchup", string(j.Catchup),
				"run", len(p.run), "missed", len(p.miss), "since", last[j.Name].UTC().Format(time.RFC3339))
		}
	}
	r.log.Info("scheduler started", "jobs", len(r.s.jobs))
	return true
}

func (r *runner) sleep(ctx context.Context, d time.Duration) bool {
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// backoff is the wait before retry number tries+1: 100ms doubling to 5s, jittered.
func backoff(tries int) time.Duration {
	d := 100 * time.Millisecond << min(tries, 6)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

func (r *runner) push(due time.Time, j *jobState, c locking.SlotClaim) {
	heap.Push(&r.queue, &pending{due: due, job: j, claim: c})
}

// nextDue is the earliest time something is due.
func (r *runner) nextDue() time.Time {
	var due time.Time
	for _, n := range r.next {
		if due.IsZero() || n.Before(due) {
			due = n
		}
	}
	if len(r.queue) > 0 && (due.IsZero() || r.queue[0].due.Before(due)) {
		due = r.queue[0].due
	}
	return due
}

// loop waits on one timer for the earliest due slot or claim, sends every
// claim due then in one batch, and repeats until ctx ends. It never polls.
func (r *runner) loop(ctx context.Context) {
	for {
		r.runPosts()
		r.dispatch(ctx, r.clock.Now())
		due := r.nextDue()
		t := r.clock.NewTimer(due.Sub(r.clock.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-r.wake:
		}
		t.Stop()
	}
}

// dispatch sends, in one round trip, every claim due at now.
func (r *runner) dispatch(ctx context.Context, now time.Time) {
	var batch []*pending
	for _, j := range r.s.jobs {
		for n := r.next[j]; !n.After(now) && len(batch) < maxBatch; n = r.next[j] {
			batch = append(batch, &pending{due: n, job: j, claim: claim(locking.ClaimLive, j.Job, n, r.s.cfg.replica)})
			r.next[j] = j.sched.Next(n)
		}
	}
	for len(r.queue) > 0 && !r.queue[0].due.After(now) && len(batch) < maxBatch {
		batch = append(batch, heap.Pop(&r.queue).(*pending))
	}
	if len(batch) == 0 {
		return
	}
	// Takeover checks due soon ride along: fewer, fuller round trips.
	var later []*pending
	for len(r.queue) > 0 && !r.queue[0].due.After(now.Add(coalesce)) && len(batch) < maxBatch {
		p := heap.Pop(&r.queue).(*pending)
		if p.claim.Kind == locking.ClaimTakeover {
			batch = append(batch, p)
		} else {
			later = append(later, p)
		}
	}
	for _, p := range later {
		heap.Push(&r.queue, p)
	}
	if offset, refused := r.s.refused(); refused {
		r.refuse(now, batch, offset)
		return
	}
	r.send(ctx, batch)
}

// refuse handles a batch while the clock is off by more than max_skew: live
// slots are left to the replicas whose clocks agree with Redis; the rest
// waits.
func (r *runner) refuse(now time.Time, batch []*pending, offset time.Duration) {
	for _, p := range batch {
		if p.claim.Kind == locking.ClaimLive {
			r.log.Error("refusing to claim: this replica's clock is off by more than max_skew",
				"slotcron.job", p.job.Name, "slotcron.slot", p.claim.Slot.UTC().Format(time.RFC3339),
				"slotcron.outcome", "refused_skew", "offset", offset.String(), "max_skew", r.s.cfg.maxSkew.String())
			_, span := r.s.tel.startSlot(context.Background(), "slot", p.job.Name, p.claim.Slot)
			r.s.tel.endSlot(span, p.job.Name, outcomeRefusedSkew, "", 0, 0, nil)
			continue
		}
		p.due = now.Add(time.Second)
		heap.Push(&r.queue, p)
	}
}

// send claims a batch in one round trip and acts on each answer.
func (r *runner) send(ctx context.Context, batch []*pending) {
	claims := make([]locking.SlotClaim, len(batch))
	for i, p := range batch {
		claims[i] = p.claim
	}
	ctxs, spans := r.s.tel.startSlots(ctx, len(batch), func(i int) (string, string, time.Time) {
		if batch[i].claim.Kind == locking.ClaimTakeover {
			return "slot.watch", batch[i].job.Name, batch[i].claim.Slot
		}
		return "slot", batch[i].job.Name, batch[i].claim.Slot
	})
	claimSpans := r.s.tel.startClaims(ctxs)
	cctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	results, err := r.s.claimer.Claim(cctx, claims)
	cancel()
	r.s.tel.endClaims(claimSpans, results, err)
	if err != nil { // the batch itself was invalid: a bug, not Redis
		r.log.Error("claim batch refused", "error", err)
		for i, p := range batch {
			r.s.tel.endSlot(spans[i], p.job.Name, outcomeError, "", 0, 0, err)
		}
		return
	}
	now := r.clock.Now()
	for i, res := range results {
		r.handle(ctx, now, batch[i], res, ctxs[i], spans[i])
	}
}

// handle acts on the answer to one claim and ends its slot span, unless a
// run carries it on.
func (r *runner) handle(ctx context.Context, now time.Time, p *pending, res locking.ClaimResult, sctx context.Context, span trace.Span) {
	j, c := p.job, p.claim
	attrs := func(more ...any) []any { // built only for a line that is logged
		return append([]any{"slotcron.job", j.Name, "slotcron.slot", c.Slot.UTC().Format(time.RFC3339)}, more...)
	}
	outcome := string(res.Outcome)
	if res.Err != nil {
		outcome = outcomeError
	}
	r.s.tel.claimed(j.Name, outcome)
	if res.Err != nil {
		if ctx.Err() != nil { // shutting down: nothing more is claimed
			r.s.tel.endSlot(span, j.Name, outcomeError, "", 0, 0, res.Err)
			return
		}
		p.tries++
		p.due = now.Add(backoff(p.tries))
		heap.Push(&r.queue, p)
		r.log.Warn("claim failed; retrying", attrs("error", res.Err, "tries", p.tries)...)
		r.s.tel.endSlot(span, j.Name, outcomeError, "", 0, 0, res.Err)
		return
	}
	switch res.Outcome {
	case locking.OutcomeWon:
		delete(r.watching, slotKey{j.Name, c.Slot.Unix()})
		r.start(j, res.Lease, c.Kind == locking.ClaimCatchup, sctx, span)
		return
	case locking.OutcomeLost:
		if r.log.Enabled(ctx, slog.LevelDebug) { // every loser, every tick
			r.log.Debug("slot lost", attrs("slotcron.holder", res.Holder, "state", string(res.State))...)
		}
		if res.State == locking.StateRunning && res.Holder != r.s.cfg.replica {
			r.watch(now, j, c.Slot, j.LeaseTTL) // the owner's lease can't expire sooner unrenewed
		}
		if c.Kind == locking.ClaimCatchup {
			r.nextCatchup(now, j)
		}
	case locking.OutcomeSkipped:
		r.log.Info("slot skipped: the previous run still holds the job", attrs("slotcron.holder", res.Holder,
			"holder_slot", res.HolderSlot.UTC().Format(time.RFC3339))...)
		if res.Holder != r.s.cfg.replica {
			r.watch(now, j, res.HolderSlot, res.Wait) // settle that run if its owner dies
		}
	case locking.OutcomeMissed:
		level := slog.LevelWarn
		if c.Kind == locking.ClaimMiss {
			level = slog.LevelInfo
		}
		r.log.Log(ctx, level, "slot missed", attrs("late", res.Late.String(), "reason", c.Reason)...)
	case locking.OutcomeBusy:
		p.due = now.Add(waitFor(res.Wait, j.LeaseTTL))
		heap.Push(&r.queue, p)
		if !res.HolderSlot.IsZero() && res.Holder != r.s.cfg.replica {
			r.watch(now, j, res.HolderSlot, res.Wait)
		}
	case locking.OutcomeAlive:
		delete(r.watching, slotKey{j.Name, c.Slot.Unix()})
		r.watch(now, j, c.Slot, res.Wait)
	case locking.OutcomeAbandoned:
		delete(r.watching, slotKey{j.Name, c.Slot.Unix()})
		r.log.Warn("slot abandoned: its owner lost its lease", attrs("slotcron.holder", res.Holder, "slotcron.attempt", res.Attempt)...)
	case locking.OutcomeClosed, locking.OutcomeGone:
		delete(r.watching, slotKey{j.Name, c.Slot.Unix()})
	}
	r.s.tel.endSlot(span, j.Name, outcome, res.Holder, res.Fence, res.Attempt, nil)
}

// waitFor is when to look again at a slot whose lease has wait left: just
// after it would expire, with a margin of a tenth of the TTL.
func waitFor(wait, ttl time.Duration) time.Duration {
	margin := max(ttl/10, 20*time.Millisecond)
	return max(wait, 0) + margin/2 + rand.N(margin/2+1)
}

// watch looks at a running slot again when its owner's lease would expire,
// to settle it (retry or abandon) if the owner is gone.
func (r *runner) watch(now time.Time, j *jobState, slot time.Time, wait time.Duration) {
	k := slotKey{j.Name, slot.Unix()}
	if r.watching[k] {
		return
	}
	r.watching[k] = true
	r.push(now.Add(waitFor(wait, j.LeaseTTL)), j, claim(locking.ClaimTakeover, j.Job, slot, r.s.cfg.replica))
}

// nextCatchup sends the next catch-up slot of j, if any: one at a time.
func (r *runner) nextCatchup(now time.Time, j *jobState) {
	rest := r.catchup[j]
	if len(rest) == 0 {
		delete(r.catchup, j)
		return
	}
	r.catchup[j] = rest[1:]
	r.push(now, j, claim(locking.ClaimCatchup, j.Job, rest[0], r.s.cfg.replica))
}

// drain waits for running jobs for the shutdown grace, then cancels them and
// waits for them to record their outcome.
func (r *runner) drain() {
	done := make(chan struct{})
	go func() { r.jobsWG.Wait(); close(done) }()
	t := r.clock.NewTimer(r.s.cfg.shutdownGrace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C():
	}
	r.log.Warn("shutdown grace is over: cancelling running jobs", "grace", r.s.cfg.shutdownGrace.String())
	r.kill()
	<-done
}

package scheduler

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// maxBatch bounds one batch of claims; a larger backlog goes out over several
// ticks.
const maxBatch = 5000

// coalesce is how early a takeover check may go out to share a round trip
// with claims due now; checking early only answers "alive".
const coalesce = 100 * time.Millisecond

// loop waits on one timer for the earliest due slot or claim, sends every
// claim due then in one batch, and repeats until ctx ends. It never polls.
// Between batches it takes the events of the goroutines that run jobs.
func (r *runner) loop(ctx context.Context) {
	for {
		r.measureStep(ctx)
		ahead := r.ahead()
		r.dispatch(ctx, r.clock.Now(), ahead)
		r.sweepDue(ctx, r.clock.Now())
		var t Timer
		var fired <-chan time.Time // nil, never ready, while nothing is due (every schedule has run out)
		if due := r.nextDue(ahead); !due.IsZero() {
			t = r.clock.NewTimer(due.Sub(r.clock.Now()))
			fired = t.C()
		}
		select {
		case <-ctx.Done():
		case <-fired:
		case ev := <-r.runEnded:
			r.measureStep(ctx)
			r.onRunEnded(ev)
			r.moreRunsEnded()
		case req := <-r.s.triggers:
			r.measureStep(ctx)
			r.onTrigger(r.clock.Now(), req)
		case <-r.s.departed:
			r.measureStep(ctx)
			r.reread = r.clock.Now()
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// measureStep measures this replica's clock against Redis if it has
// stepped since it was last measured (stepped); it blocks for that probe,
// up to the claim timeout, and costs a mutex and some arithmetic otherwise.
// Whatever reads the runner's clock goes after it: claims decided on a
// clock that just stepped could go out far too early or late, and work
// queued "now" on it (the next catch-up claim, a takeover watch, a
// trigger's claim, a reread) would be due a whole step ahead or behind once
// the runner goes by Redis's clock, as it does while its own is off by
// more than max_skew. So the loop calls it at the top of each pass and
// before it handles an event.
//
// When Redis does not answer that probe, the loop goes on on the clock it
// has, as it would after any failed probe (Redis refuses a claim that is
// too early on its own clock, and nothing can be claimed while it does not
// answer), and probes again stepRetry later, not at every pass and event:
// each would wait up to the claim timeout. The first failure is a WARN,
// the others DEBUG, and a probe that measures the clock at last says so.
func (r *runner) measureStep(ctx context.Context) {
	drift, stepped := r.s.clockStepped()
	if !stepped {
		r.stepFails = 0 // measured meanwhile (the clock loop's probe)
		return
	}
	if r.stepFails > 0 && time.Now().Before(r.stepRetry) {
		return
	}
	if r.stepFails == 0 {
		r.logStep(drift)
	}
	pctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	err := r.s.probe(pctx)
	cancel()
	switch {
	case err == nil:
		if r.stepFails > 0 {
			r.log.Info("measured the clock against Redis again, after its step", "failed_probes", r.stepFails)
		}
		r.stepFails = 0
	case ctx.Err() == nil:
		r.stepFails++
		r.stepRetry = time.Now().Add(stepRetry)
		level := slog.LevelWarn
		if r.stepFails > 1 {
			level = slog.LevelDebug
		}
		r.log.Log(ctx, level, "cannot measure the clock against Redis", "error", err,
			"failed_probes", r.stepFails, "next_probe_in", stepRetry.String())
	}
}

// stepRetry is how long the loop goes on after a probe of its stepped clock
// failed before it probes again.
const stepRetry = time.Second

// stepped reports, and logs, whether this replica's clock has stepped since
// it was last measured against Redis (Scheduler.clockStepped).
func (r *runner) stepped() bool {
	drift, stepped := r.s.clockStepped()
	if stepped {
		r.logStep(drift)
	}
	return stepped
}

// logStep says that this replica's clock stepped by drift.
func (r *runner) logStep(drift time.Duration) {
	r.log.Warn("this replica's clock stepped: measuring it against Redis before claiming", "step", drift.Round(time.Millisecond).String())
}

// onRunEnded acts on a run that has returned.
func (r *runner) onRunEnded(ev runEnded) {
	now := r.clock.Now()
	if ev.leftRunning() {
		r.watch(now, ev.job, targetOf(ev.claim), -1)
	}
	if ev.claim.Kind == slot.ClaimCatchup {
		r.nextCatchup(now, ev.job)
	}
}

// moreRunsEnded takes the events of the runs that have ended meanwhile, up
// to maxBatch: with thousands of runs a tick, one pass of the loop for them
// all rather than one each (each pass arms a timer).
func (r *runner) moreRunsEnded() {
	for range maxBatch {
		select {
		case ev := <-r.runEnded:
			r.onRunEnded(ev)
		default:
			return
		}
	}
}

// nextDue is the earliest time something is due; a live slot's claim is
// due ahead of its time.
func (r *runner) nextDue(ahead time.Duration) time.Time {
	var due time.Time
	if len(r.next) > 0 {
		due = r.next[0].at.Add(-ahead)
	}
	if len(r.queue) > 0 && (due.IsZero() || r.queue[0].due.Before(due)) {
		due = r.queue[0].due
	}
	if len(r.sweeps) > 0 && (due.IsZero() || r.sweeps[0].due.Before(due)) {
		due = r.sweeps[0].due
	}
	if len(r.backlog) > 0 {
		// Now, until the slots this replica sends first are sent; then,
		// the others', stage by stage from laterDue.
		at := r.laterNext
		if at.IsZero() {
			at = r.clock.Now()
		}
		if due.IsZero() || at.Before(due) {
			due = at
		}
	}
	if len(r.olderJobs) > 0 && (due.IsZero() || r.olderCheck.Before(due)) {
		due = r.olderCheck
	}
	if len(r.outage) > 0 && (due.IsZero() || r.outageCheck.Before(due)) {
		due = r.outageCheck
	}
	if !r.reread.IsZero() && (due.IsZero() || r.reread.Before(due)) {
		due = r.reread
	}
	return due
}

func (r *runner) push(due time.Time, j *jobState, c slot.Claim) {
	heap.Push(&r.queue, &pending{due: due, job: j, claim: c})
}

// dispatch sends, in one round trip, every claim due at now: live slots up
// to ahead after it.
func (r *runner) dispatch(ctx context.Context, now time.Time, ahead time.Duration) {
	// Not while replicas of an older protocol are live again (a rollback):
	// the read converts their records, so it waits for them, as the first
	// read did. A read that fails is tried again a second later.
	if len(r.olderJobs) > 0 && !now.Before(r.olderCheck) && (len(r.s.olderPeers()) > 0 || !r.rejoin(ctx, r.olderJobs)) {
		r.olderCheck = now.Add(time.Second)
	}
	switch {
	case r.reread.IsZero(): // the first pass: startup has just read every running slot
		r.reread = now.Add(jitter(runningSweepEvery))
	case !now.Before(r.reread):
		if r.watchAll(ctx, now) {
			r.rereadFails = 0
			r.reread = now.Add(jitter(runningSweepEvery))
		} else {
			r.rereadFails++
			r.reread = now.Add(min(time.Second<<min(r.rereadFails-1, 6), runningSweepEvery))
		}
	}
	r.closeOutages(now)
	var batch []*pending
	var hedge, backstop time.Duration // measured once, for the first slot that needs them
	for len(r.next) > 0 && !r.next[0].at.After(now.Add(ahead)) && len(batch) < maxBatch {
		j, n, prev := r.next[0].job, r.next[0].at, r.next[0].prev
		after := j.sched.Next(n)
		if after.IsZero() { // no slot after this one
			heap.Pop(&r.next)
		} else {
			r.next[0].moveTo(after, n)
			heap.Fix(&r.next, 0)
		}
		p := &pending{due: n, job: j, claim: r.bareClaim(slot.ClaimLive, j, n)}
		lead := jobAhead(ahead, prev, n, after)
		if k := r.onTime[j]; k > 0 { // an ahead claim of the job found it busy
			lead = 0
			if r.onTime[j] = k - 1; k == 1 {
				delete(r.onTime, j)
			}
		}
		if role := r.role(j, n); role != roleFirst { // other replicas claim it first
			if hedge == 0 {
				hedge = r.s.hedge()
				backstop = backstopDelay(hedge, r.batches.longest())
			}
			if role == roleBackstop {
				r.backstop(j, n, backstop)
				continue
			}
			// A hedge after the slot's time: the preferred replica, which
			// claimed ahead, has had that and more.
			p.due, p.hedged = n.Add(hedge), true
			heap.Push(&r.queue, p)
			continue
		}
		if n.Sub(now) > lead {
			// Not this far ahead for this job: its previous run may still hold it.
			p.due = n.Add(-lead)
			heap.Push(&r.queue, p)
			continue
		}
		batch = append(batch, p)
	}
	for len(r.queue) > 0 && !r.queue[0].due.After(now) && len(batch) < maxBatch {
		batch = append(batch, heap.Pop(&r.queue).(*pending))
	}
	batch = r.drainBacklog(now, batch) // last: slots to record missed, oldest first
	if len(batch) == 0 {
		return
	}
	// Takeover checks due soon ride along: fewer, fuller round trips.
	var later []*pending
	for len(r.queue) > 0 && !r.queue[0].due.After(now.Add(coalesce)) && len(batch) < maxBatch {
		p := heap.Pop(&r.queue).(*pending)
		if p.claim.Kind == slot.ClaimTakeover {
			batch = append(batch, p)
		} else {
			later = append(later, p)
		}
	}
	for _, p := range later {
		heap.Push(&r.queue, p)
	}
	older := r.s.olderPeers()
	switch {
	case len(older) > 0:
		r.barred = true
		r.refuse(now, batch, refusal{outcome: outcomeRefusedProtocol, level: slog.LevelDebug,
			msg:    "refusing to claim: replicas of an older slot protocol are live",
			attrs:  []any{"older", strings.Join(older, ",")},
			reason: fmt.Sprintf("no replica claimed the slot; %s refused: replicas of an older slot protocol were live (%s)", r.self, strings.Join(older, ", "))})
		return
	case r.barred:
		// The older replicas have left: take in what they left before claiming.
		if !r.rejoin(ctx, r.s.jobs) {
			r.refuse(now, batch, refusal{outcome: outcomeRefusedProtocol, level: slog.LevelDebug,
				msg:    "refusing to claim: the state older replicas left is not read yet",
				reason: fmt.Sprintf("no replica claimed the slot; %s refused: it could not yet read the state replicas of an older slot protocol left", r.self)})
			return
		}
		r.barred = false
	}
	if offset, refused := r.s.refused(); refused {
		r.refuse(now, batch, refusal{outcome: outcomeRefused, level: slog.LevelError, takeovers: true,
			msg:    "refusing to claim: this replica's clock is off by more than max_skew",
			attrs:  []any{"offset", offset.String(), "max_skew", r.s.cfg.maxSkew.String()},
			reason: fmt.Sprintf("no replica claimed the slot; %s refused: its clock is off Redis's by %v, more than max_skew %v", r.self, offset.Round(time.Millisecond), r.s.cfg.maxSkew)})
		return
	}
	if len(r.olderJobs) > 0 {
		batch = r.heldByOlder(ctx, now, batch)
	}
	r.send(ctx, batch)
}

// drainBacklog adds to batch, up to maxBatch, the claims of the backlog
// (slots to record missed at start) that are due at now. First, across
// every job, those of the slots this replica is the preferred replica of
// among the live candidates (every slot, while it knows of no peer); the
// others it postpones by its place in their rendezvous order. Once those
// are sent, and a backstop's delay after (backstopDelay: long after its
// peers have sent theirs), the slots it comes next for; a delay after
// that, those it comes third for; and so on. Every one goes hedged: its
// record is read first (Claimer.Peek), and only a slot with none is
// claimed. A replica alone reads in vain (a read costs Redis about a
// tenth of a claim that loses), but whom a replica knows of as it starts
// is the registry it read as it registered, or again once it has planned
// (startup): one that starts a moment after the others may see none of
// their slots missed (their live claims have moved the jobs' states on),
// or may hang. So replicas that start together after an outage cost Redis
// about a claim per slot and a read per slot and replica, where each used
// to claim every slot; and the share of a peer that does not send it is
// claimed by the next in line, a backstop's delay late, and read by the
// others after. (Each replica spaces its stages by its own delay, which
// grows with its slowest claim batch: a slow next in line may claim after
// a faster third has read, and both claim the slot; it is still recorded
// once.) Each pass looks at most at 4×maxBatch slots of its first share
// (sent or postponed), so that a million slots do not hold up the loop.
func (r *runner) drainBacklog(now time.Time, batch []*pending) []*pending {
	looked := 0
	for _, j := range r.s.jobs {
		if len(r.backlog) == 0 || len(batch) == maxBatch || looked == 4*maxBatch {
			return batch
		}
		b, ok := r.backlog[j]
		if !ok || len(b.slots) == 0 {
			continue
		}
		ids := r.s.candidatesOf(j.Name)
		alone := len(ids) < 2 || !slices.Contains(ids, r.self)
		for len(b.slots) > 0 && len(batch) < maxBatch && looked < 4*maxBatch {
			looked++
			n := 0
			if !alone {
				n = rank(ids, r.self, j.Name, b.slots[0])
			}
			if n == 0 {
				batch = append(batch, &pending{due: now, job: j, claim: r.missClaim(j, b), hedged: true})
			} else {
				b.postpone(n - 1)
			}
		}
		if b.empty() {
			delete(r.backlog, j)
		}
		if len(b.slots) > 0 {
			return batch // the rest of this replica's own first
		}
	}
	if len(r.backlog) == 0 {
		return batch
	}
	if r.laterDue.IsZero() {
		r.laterStep = backstopDelay(r.s.hedge(), r.batches.longest())
		r.laterDue = now.Add(r.laterStep)
	}
	stage := -1 // later[stage] and those before it are due
	if !now.Before(r.laterDue) {
		stage = int(now.Sub(r.laterDue) / r.laterStep)
	}
	next := -1 // the first stage that still holds slots
	for _, j := range r.s.jobs {
		b, ok := r.backlog[j]
		if !ok {
			continue
		}
		for len(batch) < maxBatch {
			if k := b.nextLater(); k < 0 || k > stage {
				break
			}
			batch = append(batch, &pending{due: now, job: j, claim: r.missClaim(j, b), hedged: true})
		}
		if b.empty() {
			delete(r.backlog, j)
		} else if k := b.nextLater(); next < 0 || k < next {
			next = k
		}
	}
	r.laterNext = r.laterDue.Add(time.Duration(next) * r.laterStep) // now, if a stage due holds slots still (the batch is full)
	return batch
}

// heldByOlder sees to it that claims which would start a run of a job
// (overlap skip) whose run a replica of an older protocol is finishing find
// that run's lease: this version sees it only as the copy that reading the
// job's state puts in it (jobstates.lua), which lapses if a read fails or
// comes late, so the states are read again first, in the same breath as
// the claims. When that read fails, those claims are refused (the slots are
// recorded missed if no replica runs them) and the rest go on.
func (r *runner) heldByOlder(ctx context.Context, now time.Time, batch []*pending) []*pending {
	held := func(p *pending) bool {
		switch p.claim.Kind {
		case slot.ClaimLive, slot.ClaimCatchup, slot.ClaimManual:
			return p.job.Overlap != OverlapAllow && slices.Contains(r.olderJobs, p.job)
		}
		return false
	}
	if !slices.ContainsFunc(batch, held) || r.rejoin(ctx, r.olderJobs) {
		return batch
	}
	var rest, refused []*pending
	for _, p := range batch {
		if held(p) {
			refused = append(refused, p)
		} else {
			rest = append(rest, p)
		}
	}
	r.refuse(now, refused, refusal{outcome: outcomeRefusedProtocol, level: slog.LevelDebug,
		msg:    "refusing to claim: a replica of an older slot protocol is finishing a run of the job, and its state could not be read",
		reason: fmt.Sprintf("no replica claimed the slot; %s refused: a run of an older slot protocol held the job, and its state could not be read", r.self)})
	return rest
}

// refusal is why a replica claims nothing now: its outcome for the slots'
// metric and spans, the log line of each slot, and the reason their records
// give if no replica runs them.
type refusal struct {
	outcome string
	level   slog.Level
	msg     string
	attrs   []any
	reason  string
	// takeovers: takeovers go on (whether an owner is gone is judged on
	// Redis's clock alone: a replica whose clock is off can tell), so that
	// a dead owner's slot is settled even when every replica refuses.
	takeovers bool
}

// refuse handles a batch while this replica claims nothing (its clock is off
// by more than max_skew, or replicas of an older protocol are live): live
// slots are left to the replicas that do claim; so that a slot still ends
// with a record when every replica refuses, each is sent again as an expire
// claim, which Redis answers once the slot's misfire grace has passed on its
// own clock (recorded missed, unless a replica ran it; and run, if it is
// the live claim's own, which won with its reply lost). Expire claims are
// sent, and so are miss claims (the slots of an outage that the catch-up
// policy does not run: Redis records them once their deadline has passed
// on its clock, so an outage ends with records even if no replica's clock
// is ever set right), and takeovers if why says so; the rest (catch-up
// claims, which would run a job now) waits.
func (r *runner) refuse(now time.Time, batch []*pending, why refusal) {
	var decided []*pending // sent now: Redis decides them on its own clock
	for _, p := range batch {
		if p.claim.Kind == slot.ClaimLive {
			if r.log.Enabled(context.Background(), why.level) {
				r.log.Log(context.Background(), why.level, why.msg, append([]any{"slotcron.job", p.job.Name,
					"slotcron.slot", p.claim.Slot.UTC().Format(time.RFC3339), "slotcron.outcome", why.outcome}, why.attrs...)...)
			}
			r.s.tel.claimed(p.job.metrics, why.outcome)
			r.s.tel.beginSlot(context.Background(), kindSlot, p.claim).end(ending{outcome: why.outcome})
			c := r.claim(slot.ClaimExpire, p.job, p.claim.Slot)
			c.Deadline = p.claim.Deadline
			c.Reason = why.reason
			// The claim may have won with its reply lost (it was sent, and
			// failed): the expire claim carries its token, so that the
			// script recognises it and answers won (then it runs), and goes
			// now, not at the deadline, so that such a run starts on time.
			c.Token, c.RunID = p.claim.Token, p.claim.RunID
			due := c.Deadline
			if p.tries > 0 {
				due = now
			}
			r.push(due, p.job, c)
			continue
		}
		if p.callerGone() {
			p.withdraw() // then sent: Redis decides
		}
		if p.claim.Kind == slot.ClaimExpire || p.claim.Kind == slot.ClaimMiss || p.claim.Kind == slot.ClaimTakeover && why.takeovers { // Redis decides; its clock is the one that counts
			decided = append(decided, p)
			continue
		}
		p.due = now.Add(time.Second)
		heap.Push(&r.queue, p)
	}
	if len(decided) > 0 {
		r.send(context.Background(), decided) // one round trip for them all
	}
}

// rejoin reads the states of jobs again, once replicas of an older protocol
// have left (the store takes in what they left: their running slots among
// them), and while they finish runs (OlderRuns), and watches every running
// slot that is not watched yet, to settle it by policy if its owner is
// gone. It reports whether it could read them.
func (r *runner) rejoin(ctx context.Context, js []*jobState) bool {
	names := make([]string, len(js))
	for i, j := range js {
		names[i] = j.Name
	}
	sctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	states, err := r.s.claimer.JobStates(sctx, names)
	cancel()
	if err != nil {
		r.log.Error("cannot read the jobs' states that replicas of an older protocol left; claiming nothing new until it can", "error", err)
		return false
	}
	r.planOlder(r.clock.Now(), js, states)
	return true
}

// watchAll reads which slots every job's state lists running, and watches
// those this replica should, to settle each by its policy if its owner is
// gone. It runs once a replica has left the registry: under spread routing
// only a slot's preferred replica and its hedgers learn that it runs, so
// when its owner left with both hedgers, the slot would stay running with
// nobody to settle it. And it runs every runningSweepEvery, for the slots
// no replica learnt of: a one-shot's (worker backfill, worker run) whose
// claim's reply was lost, and any other left running. Of a scheduled slot
// of a spread job, the replicas that would be its preferred one or its
// hedgers among the live ones watch it (this one, unless it runs the slot,
// its outcome included: r.runs); of the others, every replica. It
// reports whether it could read them.
func (r *runner) watchAll(ctx context.Context, now time.Time) bool {
	sctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	states, err := r.s.claimer.Running(sctx, r.s.table.Names)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("cannot read the jobs' running slots, to settle those whose owner is gone; trying again", "error", err)
		}
		return false
	}
	for _, j := range r.s.jobs {
		st, ok := states[j.Name]
		if !ok {
			continue
		}
		var ids []string
		if j.Routing == RoutingSpread {
			ids = r.s.candidatesOf(j.Name)
		}
		for _, at := range st.Running {
			t := target{at: at}
			if r.runs.has(t.key(j.Name)) || j.Routing == RoutingSpread && rank(ids, r.self, j.Name, at) > Hedgers {
				continue
			}
			r.watch(now, j, t, -1)
		}
		for _, id := range st.RunningManual {
			if t := (target{manual: id}); !r.runs.has(t.key(j.Name)) {
				r.watch(now, j, t, -1)
			}
		}
	}
	return true
}

// runningSweepEvery is how often a replica reads every job's running slots
// (watchAll), give or take a tenth: a slot left running with no run behind
// it and no replica watching it is settled within this and a lease TTL.
const runningSweepEvery = time.Minute

// jitter returns d, give or take a tenth, so that replicas started
// together do not read at once.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// planOlder watches every running slot of js not watched yet, and notes the
// jobs whose runs replicas of an older protocol are still finishing, to read
// their states again within a third of their lease TTL.
func (r *runner) planOlder(now time.Time, js []*jobState, states map[string]slot.JobState) {
	older := r.olderJobs[:0:0]
	every := r.s.cfg.heartbeatEvery
	for _, j := range js {
		st := states[j.Name]
		for _, at := range st.Running {
			if t := (target{at: at}); !r.watching[t.key(j.Name)] {
				r.watching[t.key(j.Name)] = true
				r.push(now, j, r.claim(slot.ClaimTakeover, j, at))
			}
		}
		for _, id := range st.RunningManual {
			if t := (target{manual: id}); !r.watching[t.key(j.Name)] {
				r.watching[t.key(j.Name)] = true
				r.push(now, j, r.takeover(j, t))
			}
		}
		if st.OlderRuns > 0 {
			older = append(older, j)
			every = min(every, max(j.LeaseTTL/3, slot.MinLeaseTTL))
		}
	}
	if len(older) > 0 && len(r.olderJobs) == 0 {
		r.log.Info("replicas of an older protocol are finishing runs of this table: their leases hold the jobs until they end", "jobs", len(older))
	}
	r.olderJobs, r.olderCheck = older, now.Add(every)
}

// send claims a batch and acts on each answer. Hedged claims and checks on
// running slots go after the others, which don't wait for them: first a
// read of their slots' records, which settles most of them (a hedged claim
// whose slot has a record lost, as a claim would say; a check whose slot
// has ended needs nothing more), and only the rest are claimed.
func (r *runner) send(ctx context.Context, batch []*pending) {
	var own, peek []*pending
	for _, p := range batch {
		if p.claim.Kind == slot.ClaimTakeover && r.runs.has(targetOf(p.claim).key(p.job.Name)) {
			// Its run is here: going, or recording its outcome past its
			// lease maybe (Redis was away). The run settles the slot, not
			// a takeover of this replica's. Looked at again later.
			p.due = r.clock.Now().Add(afterLease(-1, p.job.LeaseTTL) + time.Second)
			heap.Push(&r.queue, p)
			continue
		}
		// (A takeover sent before with no answer goes to the claim script
		// again: it may have recorded the slot abandoned, which only the
		// script knows for its own, by its token.)
		if p.hedged || p.claim.Kind == slot.ClaimTakeover && p.tries == 0 {
			peek = append(peek, p)
		} else {
			own = append(own, p)
		}
	}
	if len(own) > 0 {
		began := r.clock.Now()
		if answered := r.claimBatch(ctx, own); answered {
			// A batch that timed out measures the timeout, not Redis: it
			// would send claims a whole second ahead for the next 8.
			r.batches.add(r.clock.Now().Sub(began))
		}
	}
	if rest := r.peekFirst(ctx, peek); len(rest) > 0 {
		r.claimBatch(ctx, rest)
	}
}

// claimBatch claims a batch in one round trip and acts on each answer. It
// reports whether Redis answered every claim.
func (r *runner) claimBatch(ctx context.Context, batch []*pending) (answered bool) {
	claims := make([]slot.Claim, len(batch))
	sent := r.clock.Now()
	for i, p := range batch {
		if p.callerGone() { // at the send: a try now must not win a slot its caller was told failed
			p.withdraw()
		}
		r.identify(&p.claim) // a claim sent for the first time gets its token and run ID
		// (An expire claim that wins is a live claim's, sent again while
		// this replica refuses: refuse.)
		p.claim.Ahead = (p.claim.Kind == slot.ClaimLive || p.claim.Kind == slot.ClaimExpire) && p.claim.Slot.After(sent)
		claims[i] = p.claim
	}
	traces := r.s.tel.beginSlots(ctx, len(batch), func(i int) (string, slot.Claim) {
		switch c := batch[i].claim; {
		case c.Kind == slot.ClaimTakeover:
			return kindWatch, c
		case c.Manual != nil: // a manual claim, or a withdrawn one (pending.withdraw)
			return kindManual, c
		}
		return kindSlot, batch[i].claim
	})
	claiming(traces)
	// A stop does not cut off claims in flight: Redis may have run them,
	// and a won claim whose answer was dropped would leave its slot
	// running, to be recorded abandoned by a takeover though it never
	// started. Their answers are applied as any other: a won slot runs,
	// within the shutdown grace. The stop waits for them, at most the
	// claim timeout. A batch not sent before the stop is not sent: its
	// claims fail at once, as cut off.
	base := ctx
	if ctx.Err() == nil {
		base = context.WithoutCancel(ctx)
	}
	cctx, cancel := context.WithTimeout(base, r.s.cfg.claimTimeout)
	results, err := r.s.claimer.Claim(cctx, claims)
	cancel()
	if err != nil { // the batch itself was refused, nothing sent: a bug, not Redis
		for _, st := range traces {
			st.end(ending{outcome: outcomeError, err: err})
		}
		if len(batch) > 1 { // in halves, until the claims it refused are alone: the others must still go
			first := r.claimBatch(ctx, batch[:len(batch)/2])
			return r.claimBatch(ctx, batch[len(batch)/2:]) && first
		}
		r.refused(batch[0], err)
		return false
	}
	answered = true
	for i, res := range results {
		traces[i].answered(res, nil)
		if res.Err != nil {
			r.s.probeSoon() // Redis may have restarted: check its epoch once it answers
			answered = false
		}
	}
	now := r.clock.Now()
	early := 0
	for i, res := range results {
		if k := batch[i].claim.Kind; res.Outcome == slot.OutcomeEarly && (k == slot.ClaimLive || k == slot.ClaimCatchup) {
			early++
		}
		r.apply(ctx, now, batch[i], res, traces[i])
	}
	if early > 0 {
		r.log.Warn("claims refused by Redis: their slots are further ahead of Redis's clock than max_skew, so this replica's clock runs ahead; measuring it again",
			"claims", early, "max_skew", r.s.cfg.maxSkew.String())
	}
	return answered
}

// refused gives up a claim that the store refused as invalid, on its own: a
// bug, which no retry mends. Its slot is left with no record; a Trigger's
// caller gets the error.
func (r *runner) refused(p *pending, err error) {
	r.s.tel.claimed(p.job.metrics, outcomeError)
	r.log.Error("claim refused by the store as invalid, and not sent: the slot is left with no record (a bug; please report it)",
		append(claimAttrs(p.claim), "error", err)...)
	p.answer(slot.Result{Err: err, Wait: -1})
}

// claimAttrs are the log attributes that name a claim's slot.
func claimAttrs(c slot.Claim) []any {
	attrs := []any{"slotcron.job", c.Job, "slotcron.slot", c.Slot.UTC().Format(time.RFC3339), "claim", c.Kind.String()}
	if c.Manual != nil {
		attrs = append(attrs, "slotcron.manual_id", c.Manual.ID)
	}
	return attrs
}

// apply carries out decide's decision on the answer to one claim. A won slot's
// trace goes on with its run; every other trace ends here.
func (r *runner) apply(ctx context.Context, now time.Time, p *pending, res slot.Result, st *slotTrace) {
	j, c := p.job, p.claim
	if !res.Slot.IsZero() { // a manual slot's time, as its record has it
		c.Slot = res.Slot
		st.slotIs(res.Slot)
	}
	d := decide(c, res, r.self)
	if d.unbounded && r.stale(now, j, res.Kept) {
		d = decision{outcome: outcomeStale, nextCatchup: true, level: slog.LevelError,
			msg: "catch-up slot not run: it waited longer than its retention since this replica planned it, so a peer may have run it " +
				"and its record expired; running it could run it twice, and it keeps no record"}
	}
	if d.backoff && ctx.Err() != nil && c.Kind == slot.ClaimMiss { // not retried: the stop records it (below)
		d.level, d.msg = slog.LevelDebug, "miss claim cut off by the stop: the stop records the slot"
	}
	r.s.tel.claimed(j.metrics, d.outcome)
	if res.Unreplicated {
		r.s.tel.unreplicated(j.Name)
	}
	if d.unwatch {
		delete(r.watching, targetOf(c).key(j.Name))
	}
	if !d.backoff {
		p.answer(res)
	}
	if !d.run {
		defer st.end(ending{outcome: d.outcome, holder: res.Holder, fence: res.Fence, attempt: res.Attempt, err: res.Err})
	}
	if d.msg != "" && r.log.Enabled(ctx, d.level) {
		attrs := append(claimAttrs(c), "slotcron.outcome", d.outcome)
		switch {
		case res.Err != nil:
			attrs = append(attrs, "error", res.Err, "tries", p.tries+1)
		case res.Outcome == slot.OutcomeMissed:
			attrs = append(attrs, "late", res.Late.String(), "reason", c.Reason)
		case res.Outcome == slot.OutcomePaused:
			attrs = append(attrs, "reason", res.Reason)
		case res.Holder != "":
			attrs = append(attrs, "slotcron.holder", res.Holder, "state", string(res.State), "slotcron.attempt", res.Attempt)
			if !res.HolderSlot.IsZero() {
				attrs = append(attrs, "holder_slot", res.HolderSlot.UTC().Format(time.RFC3339))
			}
			if res.HolderManual != "" {
				attrs = append(attrs, "holder_manual", res.HolderManual)
			}
		}
		r.log.Log(ctx, d.level, d.msg, attrs...)
	}
	switch {
	case res.Err != nil:
	case res.Outcome == slot.OutcomeMissed && c.Kind != slot.ClaimMiss:
		r.s.emit(slotEvent(EventMissed, c, 0, 0, "", fmt.Sprintf("%s: started %v after the slot, past the misfire grace", c.Reason, res.Late.Round(time.Millisecond))))
	case res.Outcome == slot.OutcomeAbandoned:
		e := slotEvent(EventAbandoned, c, res.Attempt, res.Fence, "", "owner "+res.Holder+" lost its lease")
		r.s.emit(e)
	}
	if d.run {
		r.start(j, c, res.Lease, st)
		return
	}
	if !d.watch.isZero() {
		r.watch(now, j, d.watch, d.watchWait)
	}
	if d.claimLive {
		heap.Push(&r.queue, &pending{due: c.Slot, job: j, claim: r.bareClaim(slot.ClaimLive, j, c.Slot)})
	}
	if d.probe {
		r.s.probeSoon()
	}
	switch {
	case d.atSlot: // sent ahead, and a run holds the job: again at the slot's time
		p.due = c.Slot
		heap.Push(&r.queue, p)
		// Its runs may be long, or this replica behind: claiming ahead would
		// cost a second claim a slot. Its next slots go at their time.
		r.onTime[p.job] = aheadWindow
	case d.retryIn > 0:
		p.due = now.Add(d.retryIn)
		heap.Push(&r.queue, p)
	case d.unbounded:
		p.claim.MaxEarly = 0
		p.due = now
		heap.Push(&r.queue, p)
	case d.backoff && ctx.Err() != nil && p.claim.Kind == slot.ClaimMiss:
		// Shutting down, cut off in flight: a slot of the backlog is no
		// longer in it, and the stop records what the queue holds.
		heap.Push(&r.queue, p)
	case d.backoff && ctx.Err() == nil: // shutting down: nothing more is claimed
		p.tries++
		// The claim may have won with its reply lost: only the claim script
		// knows its token and answers won again. A read first would take
		// its record for another's and settle the slot as lost.
		p.hedged = false
		p.due = now.Add(backoff(p.tries))
		heap.Push(&r.queue, p)
	case d.retryAfter > 0:
		p.due = now.Add(afterLease(d.retryAfter, j.LeaseTTL))
		heap.Push(&r.queue, p)
	}
	if d.nextCatchup {
		r.nextCatchup(now, j)
	}
}

// stale reports whether j's catch-up slots have waited too long since
// startup planned them to be claimed without the retention bound: a slot
// with no record then may be one that a peer ran, whose record has expired
// since. Within the retention less twice max_skew (the two clocks each off
// Redis's by up to max_skew) of the read that planned them, a record
// written since cannot have expired. kept, when not zero, is a shorter
// retention that Redis says the job's records were written with lately (a
// peer of another config, or of the retention before a raise): a record
// that peer wrote since is kept only that long.
func (r *runner) stale(now time.Time, j *jobState, kept time.Duration) bool {
	retention := j.Retention
	if kept > 0 && kept < retention {
		retention = kept
	}
	return now.Sub(r.planned) >= retention-2*r.s.cfg.maxSkew
}

// watch looks at a running slot again when its owner's lease would expire
// (after wait; soon when wait is -1), to settle it by policy if the owner is
// gone.
func (r *runner) watch(now time.Time, j *jobState, t target, wait time.Duration) {
	k := t.key(j.Name)
	if r.watching[k] {
		return
	}
	r.watching[k] = true
	r.push(now.Add(afterLease(wait, j.LeaseTTL)), j, r.takeover(j, t))
}

// takeover is the claim that settles t if its owner is gone.
func (r *runner) takeover(j *jobState, t target) slot.Claim {
	c := r.claim(slot.ClaimTakeover, j, t.at)
	if t.manual != "" {
		c.Slot = r.clock.Now()
		c.Manual = &slot.Manual{ID: t.manual}
	}
	return c
}

// nextCatchup sends the next catch-up slot of j, if any, once the one in
// flight has its answer: one at a time.
func (r *runner) nextCatchup(now time.Time, j *jobState) {
	rest := r.catchup[j]
	if len(rest) > 0 {
		rest = rest[1:] // the one in flight
	}
	if _, open := r.outage[j]; !open {
		r.s.catchups.set(j.Name, rest)
	}
	if len(rest) == 0 {
		delete(r.catchup, j)
		return
	}
	r.catchup[j] = rest
	r.push(now, j, r.claim(slot.ClaimCatchup, j, rest[0]))
}

// closeOutages ends the outage of each job whose startup's slots are all
// answered but its catch-up's (the backlog sent, and no claim that records
// a slot missed waiting in the queue for its misfire grace): from then on
// the heartbeat publishes the catch-up slots yet to run, if any. It looks
// at most once a second, reading the whole queue.
func (r *runner) closeOutages(now time.Time) {
	if len(r.outage) == 0 || now.Before(r.outageCheck) {
		return
	}
	r.outageCheck = now.Add(time.Second)
	waiting := map[*jobState]bool{}
	for _, q := range r.queue {
		if q.p.claim.Kind == slot.ClaimMiss {
			waiting[q.p.job] = true
		}
	}
	for j := range r.outage {
		if _, ok := r.backlog[j]; ok || waiting[j] {
			continue
		}
		delete(r.outage, j)
		r.s.catchups.set(j.Name, r.catchup[j])
	}
}

// peekFirst reads the records of the slots of hedged claims and checks,
// applies the answer that the read gives (a hedged claim whose slot has a
// record lost; a check whose slot is no longer running closed), and returns
// the rest. When the read fails, every claim goes out: the claim decides
// anyway.
func (r *runner) peekFirst(ctx context.Context, batch []*pending) []*pending {
	if len(batch) == 0 {
		return nil
	}
	claims := make([]slot.Claim, len(batch))
	for i, p := range batch {
		claims[i] = p.claim
	}
	pctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	start := time.Now()
	recs, err := r.s.claimer.Peek(pctx, claims)
	done := time.Now()
	cancel()
	if err != nil {
		return batch
	}
	now := r.clock.Now()
	var rest []*pending
	quiet := false // no SDK: the batch's first trace started a span with no trace ID
	for i, p := range batch {
		rec, kind := recs[i], kindSlot
		var res slot.Result
		switch {
		case p.claim.Kind == slot.ClaimTakeover && rec.State != "" && rec.State != slot.StateRunning:
			kind, res = kindWatch, slot.Result{Outcome: slot.OutcomeClosed, Holder: rec.Owner, State: rec.State}
		case p.claim.Kind != slot.ClaimTakeover && rec.State != "":
			res = slot.Result{Outcome: slot.OutcomeLost, Holder: rec.Owner, State: rec.State, Wait: -1}
		default: // no record, or still running: the claim decides
			rest = append(rest, p)
			continue
		}
		// Settled as the claim would be; its trace shows the read.
		st := r.s.tel.peeked(ctx, kind, p.claim, res, start, done, quiet)
		quiet = !st.span.SpanContext().IsValid()
		r.apply(ctx, now, p, res, st)
	}
	return rest
}

// backstopAfter is how long after a slot's time the replicas that are
// neither its preferred one nor its hedgers look for its record, at least:
// long after either should have claimed it, so that a look finds a record
// unless all of them are gone, and half a second off the whole seconds
// that slots fall on, when the claims and finishes of the next instant
// keep Redis busy. At 20 replicas of 10,000 jobs, looks at the whole
// second (170,000 keys) delayed that second's claims: dispatch p50 rose
// from 40 to 67 ms. A replica whose claim batches are slow looks a whole
// second later for each time that the hedge and four batches do not fit,
// so that a busy Redis does not also get every backstop's claims; and no
// later than half the job's misfire grace.
const backstopAfter = 500 * time.Millisecond

// sweep is a backstop's look at the records of the slots due at one
// instant.
type sweep struct {
	due, at time.Time
	jobs    []*jobState
}

// backstopDelay is how long after a slot's time a backstop looks for its
// record, given the hedge and this replica's slowest recent claim batch:
// backstopAfter, and whole seconds more (still off the second) until the
// hedge and four such batches fit.
func backstopDelay(hedge, batch time.Duration) time.Duration {
	after := backstopAfter
	if need := hedge + 4*batch; need > after {
		after += (need - after + time.Second - 1) / time.Second * time.Second
	}
	return after
}

// backstop notes the slot of j at at for this replica's look after (at
// most half the job's misfire grace). The slots of an instant share one
// look; looks are kept in order of due time.
func (r *runner) backstop(j *jobState, at time.Time, after time.Duration) {
	due := at.Add(min(after, j.MisfireGrace/2))
	i, found := slices.BinarySearchFunc(r.sweeps, due, func(sw *sweep, due time.Time) int { return sw.due.Compare(due) })
	for ; found && i < len(r.sweeps) && r.sweeps[i].due.Equal(due); i++ {
		if r.sweeps[i].at.Equal(at) {
			r.sweeps[i].jobs = append(r.sweeps[i].jobs, j)
			return
		}
	}
	r.sweeps = slices.Insert(r.sweeps, i, &sweep{due: due, at: at, jobs: []*jobState{j}})
}

// sweepDue looks, in one round trip, for the records of the slots of every
// look due by now, and queues a live claim for each slot that has none:
// its preferred replica and its hedgers are all gone (or far behind). When
// the look fails, it queues a hedged claim for every slot (read first, and
// sent only if the slot has no record): the claim decides, and is sent
// again until Redis answers.
func (r *runner) sweepDue(ctx context.Context, now time.Time) {
	n, k := 0, 0
	for ; k < len(r.sweeps) && !r.sweeps[k].due.After(now); k++ {
		n += len(r.sweeps[k].jobs)
	}
	if n == 0 {
		return
	}
	js, slots := make([]*jobState, 0, n), make([]slot.Ref, 0, n)
	for _, sw := range r.sweeps[:k] {
		for _, j := range sw.jobs { // each slot once: r.next hands out each slot once
			js = append(js, j)
			slots = append(slots, slot.Ref{Job: j.Name, At: sw.at})
		}
	}
	r.sweeps = r.sweeps[k:]
	sctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	missing, err := r.s.claimer.Missing(sctx, slots)
	cancel()
	switch {
	case ctx.Err() != nil: // stopping: nothing more is claimed
		return
	case err != nil:
		// Hedged: each is read first, and claimed only if it has no record.
		r.log.Warn("cannot look for the records of slots this replica backs up: reading them again, and claiming those with none",
			"slots", len(slots), "error", err)
		for i, j := range js {
			heap.Push(&r.queue, &pending{due: now, job: j, claim: r.bareClaim(slot.ClaimLive, j, slots[i].At), hedged: true})
		}
		return
	case len(missing) > 0:
		r.log.Warn("slots have no record a backstop after their time: neither their preferred replica nor its hedgers "+
			"claimed them (or this replica's clock runs ahead); claiming them",
			"slots", len(missing), "slotcron.job", js[missing[0]].Name, "slotcron.slot", slots[missing[0]].At.UTC().Format(time.RFC3339))
	}
	for _, i := range missing {
		// Not hedged: the look found no record, so the claim goes out
		// without a read first.
		heap.Push(&r.queue, &pending{due: now, job: js[i], claim: r.bareClaim(slot.ClaimLive, js[i], slots[i].At)})
	}
}

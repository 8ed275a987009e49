package scheduler

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/slotcron/slotcron/slot"
)

// runner is one Run of a Scheduler. The loop goroutine owns every field but
// the channels and the goroutines' wait groups; the goroutines that run jobs
// tell it what happened with typed events.
type runner struct {
	s     *Scheduler
	clock Clock // runnerClock: Redis's while the replica's own is off by more than max_skew
	log   *slog.Logger
	self  string

	// Owned by the loop goroutine.
	stepFails int                       // probes of a stepped clock that failed in a row (measureStep)
	stepRetry time.Time                 // when measureStep probes again after one failed (real time)
	tokenBase string                    // random, per Run: claim tokens are tokenBase.N
	tokens    uint64                    // claim tokens made so far
	next      nextQueue                 // each job's next live slot
	queue     pendingQueue              // retries, catch-ups, watches
	backlog   map[*jobState]*backlog    // slots to record missed at start, sent maxBatch at a time
	catchup   map[*jobState][]time.Time // catch-up slots yet to run, oldest first: the first is in flight
	// outage holds, per job, the range of every slot its startup planned
	// (to run, or to record missed), while any of them waits: the
	// heartbeat publishes it, so that a successor or a peer records those
	// slots if this replica is killed (settleGone). The backlog's and the
	// misses waiting for their misfire grace are in no catch-up of a
	// running replica, and no later start plans them. outageCheck is when
	// closeOutages looks again.
	outage      map[*jobState]slot.CatchupRange
	outageCheck time.Time
	watching    map[slotKey]bool
	batches     aheadMeter        // how long claim batches took, for ahead
	onTime      map[*jobState]int // jobs whose next slots are claimed at their time, and how many
	sweeps      []*sweep          // a backstop's looks at slots' records, by due time
	reread      time.Time         // when every job's running slots are read again (watchAll); zero: before the first pass
	// rereadFails counts the reads of the running slots that failed in a row.
	rereadFails int
	// laterDue is when the backlog's postponed slots start to go, a stage
	// every laterStep (drainBacklog), and laterNext when the next of them
	// do; zero until the backlog's others are sent.
	laterDue, laterNext time.Time
	laterStep           time.Duration
	// runs holds the slots whose runs are here, from their start until
	// their outcome is recorded (or left to a takeover): watchAll and this
	// replica's takeovers leave them to their run.
	runs   keySet
	barred bool // claims were refused while replicas of an older protocol were live
	// olderJobs are the jobs with runs that replicas of an older protocol
	// are finishing (slot.JobState.OlderRuns): their states are read again
	// at olderCheck, and before each claim that would start one of them
	// (heldByOlder), which keeps the copy of those runs' leases current.
	olderJobs  []*jobState
	olderCheck time.Time
	// planned is when startup read the jobs' states, on the runner's clock:
	// a catch-up slot planned then had no record, and any record of it was
	// written after. Until a retention (less twice max_skew) has passed
	// since, such a record cannot have expired: the absence of one still
	// says that the slot never ran (stale).
	planned time.Time

	// settled are the gone replicas' entries (ID, instance, last seen)
	// whose unreached catch-up slots are recorded (settleGone). Owned by
	// the heartbeat loop's settling goroutine, one at a time.
	settled map[string]bool

	runEnded chan runEnded // from run goroutines to the loop
	loopDone chan struct{} // closed when the loop has returned: nobody receives events

	gates    gates // the runs that wait for their slot's time
	jobsWG   sync.WaitGroup
	killCtx  context.Context // cancelled when the shutdown grace has passed
	kill     context.CancelFunc
	renew    *renewer
	finisher *finisher
}

// runEnded tells the loop that a run has returned and its outcome has been
// recorded (or could not be).
type runEnded struct {
	job   *jobState
	claim slot.Claim // the claim that won the run
	// state is the final state the run recorded (or tried to); "" when the
	// lease was lost under on_owner_lost: retry, so the record stays running
	// for a takeover, by any replica, this one included.
	state slot.State
}

// leftRunning reports whether the run left its slot running for a takeover.
func (e runEnded) leftRunning() bool { return e.state == "" }

func newRunner(s *Scheduler) *runner {
	killCtx, kill := context.WithCancel(context.Background())
	return &runner{
		s:         s,
		clock:     runnerClock{s},
		log:       s.log.With("slotcron.replica", s.cfg.replica),
		self:      s.cfg.replica,
		tokenBase: newTokenBase(),
		catchup:   map[*jobState][]time.Time{},
		backlog:   map[*jobState]*backlog{},
		outage:    map[*jobState]slot.CatchupRange{},
		watching:  map[slotKey]bool{},
		settled:   map[string]bool{},
		onTime:    map[*jobState]int{},
		runEnded:  make(chan runEnded),
		loopDone:  make(chan struct{}),
		killCtx:   killCtx,
		kill:      kill,
		renew:     newRenewer(s),
		finisher:  newFinisher(s),
	}
}

func (r *runner) run(ctx context.Context) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); r.renew.loop(bg) }()
	go func() { defer bgWG.Done(); r.finisher.loop(bg) }()

	err := r.register(ctx)
	if err == nil && r.startup(ctx) {
		var hbWG sync.WaitGroup
		bgWG.Add(1)
		hbWG.Add(1)
		go func() { defer bgWG.Done(); r.s.clockLoop(ctx) }()
		go func() { defer hbWG.Done(); r.heartbeatLoop(ctx) }()
		r.s.looping.Store(true)
		r.loop(ctx)
		r.s.looping.Store(false)
		close(r.s.loopDone)
		hbWG.Wait() // no heartbeat after the Leave: peers would count on this replica again
		r.stop(context.WithoutCancel(ctx))
	}
	close(r.loopDone)
	r.drain()
	stopBG()
	bgWG.Wait()
	r.kill()
	r.log.Info("scheduler stopped")
	return err
}

// ended tells the loop that a run has ended, unless the loop has returned.
func (r *runner) ended(ev runEnded) {
	select {
	case r.runEnded <- ev:
	case <-r.loopDone:
	}
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

// claim returns the request for one slot of j. A claim that can win gets a
// token and a run ID of its own, which it keeps when it is sent again: a
// claim whose reply was lost is then recognised as the same claim.
func (r *runner) claim(kind slot.Kind, j *jobState, at time.Time) slot.Claim {
	c := r.bareClaim(kind, j, at)
	r.identify(&c)
	return c
}

// bareClaim is claim without the token and run ID, which identify adds when
// it is sent: a hedged claim waits with none, as most are settled by a read
// of their slot's record and never sent.
func (r *runner) bareClaim(kind slot.Kind, j *jobState, at time.Time) slot.Claim {
	c := claim(kind, j.Job, at, r.self)
	if kind == slot.ClaimCatchup {
		// A catch-up slot is in the past: Redis refuses one still to
		// come, should a plan have been made on a clock that was not its.
		c.MaxEarly = r.s.cfg.maxSkew
	}
	if kind == slot.ClaimLive {
		c.MaxEarly = r.s.cfg.maxSkew
		// Under routing race every candidate claims the slot at its time,
		// and all but the first find its record: they read it first. (Under
		// spread, the replicas that are not preferred read before they claim.)
		c.Contested = j.Routing == RoutingRace && r.s.contenders(j.Name) > 1
	}
	return c
}

// identify gives c the token and run ID its run takes if it wins, unless it
// has them: a claim sent again keeps its own, so that the store knows it. A
// miss or expire claim runs nothing, so it gets no run ID; it gets a token,
// which the record it closes keeps, so that sent again after its reply was
// lost it gets its first answer again.
func (r *runner) identify(c *slot.Claim) {
	if c.Token != "" {
		return
	}
	r.tokens++
	c.Token = r.tokenBase + "." + strconv.FormatUint(r.tokens, 10)
	if c.Kind != slot.ClaimMiss && c.Kind != slot.ClaimExpire {
		c.RunID = uuid.Must(uuid.NewV7()).String()
	}
}

// newTokenBase returns 128 random bits, base64url-encoded.
func newTokenBase() string {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// backoff is the wait before retry number tries+1: 100ms doubling to 5s, jittered.
func backoff(tries int) time.Duration {
	d := 100 * time.Millisecond << min(tries, 6)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// afterLease is when to look again at a slot whose lease has wait left: just
// after it would run out, with a margin of a tenth of the TTL, jittered so
// that the replicas watching it do not all ask at once.
func afterLease(wait, ttl time.Duration) time.Duration {
	margin := max(ttl/10, 20*time.Millisecond)
	return max(wait, 0) + margin/2 + rand.N(margin/2+1)
}

// claimCounted sends claims in one call, unless ctx has ended (past the
// claim timeout: they are not sent), and counts each answer in the claims
// metric: an error for each when the call failed.
func (r *runner) claimCounted(ctx context.Context, claims []slot.Claim) ([]slot.Result, error) {
	var res []slot.Result
	err := ctx.Err()
	if err == nil {
		res, err = r.s.claimer.Claim(ctx, claims)
	}
	for k, c := range claims {
		outcome := outcomeError
		if err == nil && res[k].Err == nil {
			outcome = string(res[k].Outcome)
		}
		r.s.tel.claimed(r.s.tel.metricsOf(c.Job), outcome)
	}
	return res, err
}

// flushMisses records, as the replica stops, the slots that its catch-up
// policy left missed and that have no record yet: those still in the
// backlog, and those waiting for their misfire grace to pass on Redis's
// clock (plan.go's claim). Nobody else would record them: the job's state
// already holds later slots, from which the next start plans. They go
// with the slot's own time for deadline, not the end of its grace: a
// replica whose clock lags may yet claim one of the latest within its
// misfire grace, but a slot recorded missed a little early is better than
// one left with no record. None is recorded before its time on Redis's
// clock, though: one still to come there (planned on a clock that was not
// Redis's) is left to the replicas that claim it live. It takes at most
// the claim timeout; what it cannot record is logged at ERROR.
//
// So are, for the same reason, the catch-up slots it had not run yet
// (catchup all and last), the one whose claim is in flight included,
// unless its run is here or one of peers holds it in its own catch-up
// (carrier). Each answer counts in the claims metric.
func (r *runner) flushMisses(ctx context.Context, peers []slot.Replica) {
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
	defer cancel()
	// Sent maxBatch at a time as they are made: a backlog may hold a
	// million slots, which are not all made into claims at once.
	var (
		chunk                          []slot.Claim
		recorded, failed, ahead, total int
		lastErr                        error
	)
	flush := func() {
		if len(chunk) == 0 {
			return
		}
		res, err := r.claimCounted(ctx, chunk)
		for k := range chunk {
			switch {
			case err != nil:
				failed, lastErr = failed+1, err
			case res[k].Err != nil:
				failed, lastErr = failed+1, res[k].Err
			case res[k].Outcome == slot.OutcomeEarly:
				ahead++
			default:
				recorded++ // missed, or it had a record meanwhile
			}
		}
		chunk = chunk[:0]
	}
	add := func(c slot.Claim) {
		total++
		if chunk = append(chunk, c); len(chunk) == maxBatch {
			flush()
		}
	}
	for _, q := range r.queue {
		if q.p.claim.Kind == slot.ClaimMiss {
			c := q.p.claim
			c.Deadline = c.Slot
			add(c)
		}
	}
	for j, b := range r.backlog {
		for !b.empty() {
			c := r.missClaim(j, b)
			c.Deadline = c.Slot
			add(c)
		}
	}
	policy := total
	left, carriers := 0, map[string]bool{}
	for j, rest := range r.catchup {
		for _, at := range rest {
			if r.runs.has(target{at: at}.key(j.Name)) { // its run records it
				continue
			}
			if id := carrier(peers, j.Name, at); id != "" {
				left++
				carriers[id] = true
				continue
			}
			c := r.claim(slot.ClaimMiss, j, at)
			c.Deadline, c.Reason = at, stopReason(r.self)
			add(c)
		}
	}
	flush()
	if left > 0 {
		r.log.Info("stopping: leaving catch-up slots not reached to live peers that hold them in their own catch-up",
			"slots", left, "peers", joinKeys(carriers))
	}
	if total == 0 {
		return
	}
	if ahead > 0 {
		r.log.Warn("stopping with slots that the catch-up policy left missed but that are still to come on Redis's clock: not recorded; "+
			"the replicas claim them live at their time", "slots", ahead)
	}
	attrs := []any{"slots", total, "left_by_the_policy", policy, "catchup_not_reached", total - policy, "recorded", recorded}
	if failed > 0 {
		r.log.Error("stopping with slots that the catch-up policy left missed, or that the catch-up had not reached, and that are not recorded: they keep no record",
			append(attrs, "not_recorded", failed, "error", lastErr)...)
		return
	}
	level := slog.LevelInfo
	if total > policy {
		level = slog.LevelWarn // slots the policy meant to run
	}
	r.log.Log(ctx, level, "stopping: recorded missed the slots that the catch-up policy left missed, or that the catch-up had not reached, without waiting for their misfire grace", attrs...)
}

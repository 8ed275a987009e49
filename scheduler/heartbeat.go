package scheduler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// DefaultHeartbeatEvery is how often a replica publishes itself in the
// registry. A replica not seen for three periods is no longer live.
const DefaultHeartbeatEvery = 5 * time.Second

// Disagreement is a job on which this replica and a live peer differ: the
// peer runs it with other settings, or does not run it, or a deployment
// under another key prefix on the same Redis runs it too (then each prefix
// runs its slots once: twice in all). With Job "", it is the replicas'
// own settings that differ (max_skew), not a job's.
type Disagreement struct {
	Job    string // "" for the replicas' own settings; "*" for a whole table (hashes only)
	Peer   string // a replica ID, or "prefix <p>" for another deployment
	Mine   string // this replica's settings line; "" when its table lacks the job
	Theirs string // the peer's; "" when its table lacks the job
}

func (d Disagreement) String() string {
	switch {
	case d.Job == "":
		mine, theirs := differing(d.Mine, d.Theirs)
		return fmt.Sprintf("replica settings: %s runs with %s; this replica with %s", d.Peer, theirs, mine)
	case d.Job == "*":
		return fmt.Sprintf("%s runs another table (%s, this replica %s): too many jobs to compare one by one", d.Peer, d.Theirs, d.Mine)
	case strings.HasPrefix(d.Peer, "prefix "):
		return fmt.Sprintf("job %s also runs under key %s on this Redis: each prefix runs its slots", d.Job, d.Peer)
	case d.Theirs == "":
		return fmt.Sprintf("job %s: %s does not run it", d.Job, d.Peer)
	case d.Mine == "":
		return fmt.Sprintf("job %s: %s runs it, this replica does not", d.Job, d.Peer)
	}
	mine, theirs := differing(d.Mine, d.Theirs)
	return fmt.Sprintf("job %s: %s runs it with %s; this replica with %s", d.Job, d.Peer, theirs, mine)
}

// replicaSettings is a replica's own settings (not its jobs') in one
// canonical line, as settings is a job's.
func replicaSettings(r slot.Replica) string {
	return fmt.Sprintf("max_skew=%v", r.MaxSkew)
}

// setting is one key=value of a settings line; a value may be quoted.
var setting = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// differing returns the settings of a and b that differ, each side in order.
func differing(a, b string) (string, string) {
	values := func(line string) ([]string, map[string]string) {
		var keys []string
		m := map[string]string{}
		for _, kv := range setting.FindAllStringSubmatch(line, -1) {
			keys = append(keys, kv[1])
			m[kv[1]] = kv[0]
		}
		return keys, m
	}
	keys, am := values(a)
	_, bm := values(b)
	var da, db []string
	for _, k := range keys {
		if am[k] != bm[k] {
			da, db = append(da, am[k]), append(db, bm[k])
		}
	}
	return strings.Join(da, " "), strings.Join(db, " ")
}

// peerView is what the last heartbeat found. One mutex guards it: the
// heartbeat loop writes, Replicas reads.
type peerView struct {
	mu            sync.Mutex
	reg           slot.Registry
	disagreements []Disagreement
	// candidates are, per job, the IDs of the live replicas that run it and
	// claim (their clock is within their max_skew): whom spread routing picks
	// from.
	candidates map[string][]string
	// sameTable are the IDs of the candidates that publish only their
	// table's hash (a large table) and run this replica's table: they are
	// candidates for every job of it.
	sameTable []string
	// older are the IDs of the live replicas of an older slot protocol
	// (slot.Registry.Older): while there is one, this replica claims nothing.
	older []string
	// gone are the replicas that heartbeats found gone mid catch-up
	// (slot.Registry.Gone), by goneKey, until settleGone has recorded
	// their unreached slots: a later heartbeat may no longer read an entry
	// (a successor under its ID replaced it).
	gone map[string]slot.Replica
}

// goneKey tells one gone replica's entry from another: its ID, its
// instance and its last heartbeat.
func goneKey(g slot.Replica) string {
	return g.ID + " " + g.Instance + " " + strconv.FormatInt(g.Seen.UnixMilli(), 10)
}

// olderPeers returns the IDs of the live replicas of an older slot protocol,
// as the last heartbeat found them.
func (s *Scheduler) olderPeers() []string {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	return s.peers.older
}

// Replicas returns what this replica's last heartbeat found: every live
// replica of the deployment, itself included, and the jobs on which they
// disagree. It does not block on Redis.
func (s *Scheduler) Replicas() (slot.Registry, []Disagreement) {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	return s.peers.reg, slices.Clone(s.peers.disagreements)
}

// JobSettings is j's settings in the canonical line each replica publishes
// for it in the registry (slot.Replica.Jobs), j with its defaults set
// (Job.WithDefaults): a command that runs slots outside the table (a
// backfill) compares it with the live replicas'.
func JobSettings(j Job) string { return settings(j) }

// settings is a job's settings in one canonical line: replicas agree on a
// job when their lines are equal.
func settings(j Job) string {
	return fmt.Sprintf("schedule=%q overlap=%s lease_ttl=%v on_owner_lost=%s max_attempts=%d misfire_grace=%v "+
		"catchup=%s catchup_window=%v timeout=%v retention=%v routing=%s", j.Schedule, j.Overlap, j.LeaseTTL, j.OnOwnerLost,
		j.MaxAttempts, j.MisfireGrace, j.Catchup, j.CatchupWindow, j.Timeout, j.Retention, j.Routing)
}

// buildVersion is the main module's version and VCS revision, from the
// build info.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, st := range bi.Settings {
		switch {
		case st.Key == "vcs.revision" && len(st.Value) >= 12:
			v += " " + st.Value[:12]
		case st.Key == "vcs.modified" && st.Value == "true":
			v += "+dirty"
		}
	}
	return v
}

// me is this replica as its heartbeat publishes it.
func (s *Scheduler) me() slot.Replica {
	offset, _ := s.Offset()
	return slot.Replica{ID: s.cfg.replica, Instance: s.instance, Version: s.cfg.version, Started: s.started0,
		Offset: offset, MaxSkew: s.cfg.maxSkew, Jobs: s.table.Jobs, Table: s.table.Table, Names: s.table.Names,
		Catchup: s.catchups.snapshot()}
}

// tableOf is a table as the heartbeat publishes it, computed once: its jobs'
// settings lines (none past maxListedJobs), its hash and its job names.
func tableOf(js []*jobState) slot.Replica {
	jobs := make(map[string]string, len(js))
	names := make([]string, 0, len(js))
	for _, j := range js {
		jobs[j.Name] = settings(j.Job)
		names = append(names, j.Name)
	}
	t := slot.Replica{Jobs: jobs, Table: slot.TableHash(jobs), Names: names}
	if len(jobs) > maxListedJobs {
		t.Jobs = nil // the hash tells tables apart; a list would be megabytes to send and compare
	}
	return t
}

// keepGone adds gone to the entries of replicas gone from the registry that
// settleGone has yet to settle.
func (s *Scheduler) keepGone(gone []slot.Replica) {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	for _, g := range gone {
		if s.peers.gone == nil {
			s.peers.gone = map[string]slot.Replica{}
		}
		key := goneKey(g)
		if was, ok := s.peers.gone[key]; ok && g.Jobs == nil {
			g.Jobs = was.Jobs // read while its list was there (a successor under its ID replaces it)
		}
		s.peers.gone[key] = g
	}
}

// maxListedJobs is the largest table a replica lists job by job in its
// heartbeat. Past it, it publishes only the table's hash: replicas then see
// whether their tables agree, not on which jobs they differ.
const maxListedJobs = 500

func (s *Scheduler) staleAfter() time.Duration { return 3 * s.cfg.heartbeatEvery }

// heartbeat publishes this replica and takes in what its peers published.
func (s *Scheduler) heartbeat(ctx context.Context) error {
	reg, err := s.claimer.Heartbeat(ctx, s.me(), s.staleAfter())
	if err != nil {
		// The gone entries read before the error are kept: this heartbeat's
		// script may have replaced one (a predecessor under this ID), and
		// nobody would read it again.
		s.keepGone(reg.Gone)
		return err
	}
	me := s.me()
	dis := disagreements(me, s.cfg.keyPrefix, reg)
	cands, same := candidates(me, reg, s.cfg.maxSkew)
	older := reg.Older()
	s.peers.mu.Lock()
	before, olderBefore, was := s.peers.disagreements, s.peers.older, s.peers.reg
	wasCands, wasSame := s.peers.candidates, s.peers.sameTable
	s.peers.reg, s.peers.disagreements, s.peers.candidates, s.peers.sameTable = reg, dis, cands, same
	s.peers.older = older
	s.peers.mu.Unlock()
	s.keepGone(reg.Gone)
	if left(was, reg) || dropped(wasCands, wasSame, cands, same) {
		select { // the loop reads which slots run: it may now have to watch some that the replica gone (or no longer a candidate) watched
		case s.departed <- struct{}{}:
		default:
		}
	}
	s.tel.disagree(len(dis))
	s.tel.olderProtocol(len(older))
	if !slices.Equal(olderBefore, older) {
		if len(older) > 0 {
			s.log.Error(fmt.Sprintf("replicas of an older slot protocol are live (%s): they keep their state where this "+
				"version does not look, so this replica claims nothing until they have left; upgrade or stop them",
				strings.Join(older, ", ")), "slotcron.replica", s.cfg.replica, "protocol", reg.Protocol)
		} else {
			s.log.Info("no replica of an older slot protocol is live: this replica claims again", "slotcron.replica", s.cfg.replica)
		}
	}
	if !slices.Equal(before, dis) {
		for _, d := range dis {
			attrs := []any{"slotcron.replica", s.cfg.replica, "peer", d.Peer}
			if d.Job != "" {
				attrs = append(attrs, "slotcron.job", d.Job)
			}
			s.log.Warn("replicas disagree: "+d.String(), attrs...)
		}
		if len(dis) == 0 && len(before) > 0 {
			s.log.Info("replicas agree again, on every job and setting", "slotcron.replica", s.cfg.replica)
		}
	}
	return nil
}

// left reports whether a replica live in was is no longer live in now.
func left(was, now slot.Registry) bool {
	for _, p := range was.Replicas {
		if !slices.ContainsFunc(now.Replicas, func(q slot.Replica) bool { return q.ID == p.ID }) {
			return true
		}
	}
	return false
}

// dropped reports whether a replica that was a candidate for a job is no
// longer one: its clock went past its max_skew, or it no longer runs the
// job. It refuses to claim that job's slots from then on, takeovers
// included, so the running slots it watched as a hedger need other
// watchers, as when a replica leaves the registry.
func dropped(wasCands map[string][]string, wasSame []string, cands map[string][]string, same []string) bool {
	for _, id := range wasSame {
		if !slices.Contains(same, id) {
			return true
		}
	}
	for job, ids := range wasCands {
		for _, id := range ids {
			if !slices.Contains(cands[job], id) {
				return true
			}
		}
	}
	return false
}

// register publishes this replica for the first time. Another live process
// with its ID may be its own crashed predecessor, whose entry goes stale
// within three heartbeats: register waits that long, then refuses, with an
// error wrapping slot.ErrDuplicateReplica.
func (r *runner) register(ctx context.Context) error {
	var since time.Time
	for tries := 0; ; tries++ {
		hctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
		err := r.s.heartbeat(hctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return nil // stopped before it started
		case errors.Is(err, slot.ErrDuplicateReplica):
			now := r.clock.Now()
			if since.IsZero() {
				since = now
				r.log.Warn("replica ID in use: waiting to see whether it is this replica's crashed predecessor",
					"error", err, "wait", r.s.staleAfter().String())
			}
			if now.Sub(since) > r.s.staleAfter() {
				r.log.Error("replica ID in use by another live process: refusing to start; give each replica its own ID",
					"error", err)
				return err
			}
			if !r.sleep(ctx, r.s.cfg.heartbeatEvery) {
				return nil
			}
		default:
			r.log.Error("scheduler start: cannot register this replica; retrying", "error", err)
			if !r.sleep(ctx, backoff(tries)) {
				return nil
			}
		}
	}
}

// heartbeatLoop publishes this replica every period until ctx ends.
// After each, it records the catch-up slots of replicas gone mid catch-up
// (settleGone), in a goroutine of its own, one at a time, so that a long
// backlog does not hold the heartbeats back; it waits for it before it
// returns.
func (r *runner) heartbeatLoop(ctx context.Context) {
	var settling sync.WaitGroup
	defer settling.Wait()
	busy := make(chan struct{}, 1)
	settle := func() {
		select {
		case busy <- struct{}{}:
		default:
			return // the last one is still at it
		}
		settling.Add(1)
		go func() {
			defer settling.Done()
			defer func() { <-busy }()
			r.settleGone(ctx)
		}()
	}
	settle() // the registration's heartbeat read the registry
	for r.sleep(ctx, r.s.cfg.heartbeatEvery) {
		r.beat(ctx, r.s.cfg.claimTimeout, "heartbeat failed")
		settle()
	}
}

// beat publishes this replica once, waiting up to timeout, and reports a
// failure: another live process with its ID at ERROR (and its metric),
// any other with failed, at WARN.
func (r *runner) beat(ctx context.Context, timeout time.Duration, failed string) {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	err := r.s.heartbeat(hctx)
	cancel()
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.Is(err, slot.ErrDuplicateReplica):
		r.s.tel.duplicate()
		r.log.Error("another live process now uses this replica's ID: records, leases and logs can't tell them apart", "error", err)
	default:
		r.log.Warn(failed, "error", err)
	}
}

// disagreements compares me with every live peer's settings (its own, and
// its table's), and with the other deployments on the same Redis.
func disagreements(me slot.Replica, prefix string, reg slot.Registry) []Disagreement {
	var out []Disagreement
	for _, p := range reg.Replicas {
		if p.ID == me.ID {
			continue
		}
		// Spread routing copes with peers whose max_skew differ (candidates
		// judges each by its own), but a difference is a deploy under way
		// or a typo, and each replica still bounds its own claims, start-up
		// and backfills by its own. 0 is a peer that does not publish it
		// (an older version): unknown, not different.
		if me.MaxSkew > 0 && p.MaxSkew > 0 && p.MaxSkew != me.MaxSkew {
			out = append(out, Disagreement{Peer: p.ID, Mine: replicaSettings(me), Theirs: replicaSettings(p)})
		}
		if me.Jobs == nil || p.Jobs == nil { // a large table: only its hash is known
			if p.Table != me.Table {
				out = append(out, Disagreement{Job: "*", Peer: p.ID, Mine: "table " + me.Table, Theirs: "table " + p.Table})
			}
			continue
		}
		for job, mine := range me.Jobs {
			if theirs := p.Jobs[job]; theirs != mine {
				out = append(out, Disagreement{Job: job, Peer: p.ID, Mine: mine, Theirs: theirs})
			}
		}
		for job, theirs := range p.Jobs {
			if _, ok := me.Jobs[job]; !ok {
				out = append(out, Disagreement{Job: job, Peer: p.ID, Theirs: theirs})
			}
		}
	}
	for _, d := range reg.Deployments {
		if d.Prefix == prefix {
			continue
		}
		for _, job := range d.Jobs {
			if slices.Contains(me.Names, job) {
				mine := me.Jobs[job]
				if mine == "" { // a large table lists no settings
					mine = "table " + me.Table
				}
				out = append(out, Disagreement{Job: job, Peer: "prefix " + d.Prefix, Mine: mine})
			}
		}
	}
	slices.SortFunc(out, func(a, b Disagreement) int {
		return strings.Compare(a.Job+"\x00"+a.Peer, b.Job+"\x00"+b.Peer)
	})
	return out
}

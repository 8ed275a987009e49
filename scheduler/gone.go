package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// goneReason is recorded with a catch-up slot that a replica had not
// reached when it stopped heartbeating without leaving the registry.
func goneReason(replica string) string {
	return "no replica was running at the slot; " + replica + " stopped heartbeating before its catch-up reached it " +
		"(killed, or paused past the stale window)"
}

// settleGone records missed the catch-up slots that replicas gone from the
// registry had not reached. A replica killed mid catch-up (SIGKILL, the OOM
// killer, a lost host) records nothing as it dies, and the job's state
// already holds the live slots that ran meanwhile, so no later start plans
// those slots again: they would keep no record. Its entry stays in the
// registry, stale, with the range it last published (slot.Registry.Gone),
// until it is removed 15 minutes later (slotstore.GoneKept); a live replica of the same
// table, or the killed one's successor under its ID, reads it there.
//
// It leaves alone the slots that this replica or a live peer holds in its
// own catch-up (they run them), and those that have a record (run, or
// recorded by another peer first): it reads which have none, then claims
// each of those missed, once its misfire grace has passed on Redis's clock.
// A gone replica that was only paused finds the record when it comes back
// and does not run the slot. An entry is settled once every slot of it is
// recorded; one that could not be (Redis did not answer, or a grace has not
// passed) is tried again at the next heartbeat.
func (r *runner) settleGone(ctx context.Context) {
	r.s.peers.mu.Lock()
	reg, gone := r.s.peers.reg, maps.Clone(r.s.peers.gone)
	r.s.peers.mu.Unlock()
	defer func() {
		r.s.peers.mu.Lock()
		for key := range r.settled {
			delete(r.s.peers.gone, key)
		}
		r.s.peers.mu.Unlock()
	}()
	for _, key := range slices.Sorted(maps.Keys(gone)) {
		g := gone[key]
		if (g.ID == r.self && g.Instance == r.s.instance) || r.settled[key] {
			r.settled[key] = true
			continue
		}
		js, unlike := r.s.jobs, []string(nil)
		if g.Table != r.s.table.Table {
			js, unlike = r.sameJobs(g)
		}
		if err := r.settle(ctx, reg, g, js); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("cannot yet record the catch-up slots that "+g.ID+" had not reached: trying again at the next heartbeat",
					"peer", g.ID, "error", err)
			}
			continue
		}
		r.settled[key] = true
		if len(unlike) > 0 {
			r.logUnlike(reg, g, unlike)
		}
	}
}

// sameJobs splits the jobs of g's catch-up, g running another table than
// this replica's (a deploy under way): those this replica runs with the
// same settings, whose slots it can settle as g's own table would, and the
// others (changed, or not in this table, or g's list unknown: a table of
// more than 500 jobs), whose slots it cannot tell from its own.
func (r *runner) sameJobs(g slot.Replica) (same []*jobState, unlike []string) {
	mine := make(map[string]*jobState, len(r.s.jobs))
	for _, j := range r.s.jobs {
		mine[j.Name] = j
	}
	for _, name := range slices.Sorted(maps.Keys(g.Catchup)) {
		if j := mine[name]; j != nil && g.Jobs != nil && g.Jobs[name] == settings(j.Job) {
			same = append(same, j)
		} else {
			unlike = append(unlike, name)
		}
	}
	return same, unlike
}

// logUnlike says what becomes of the catch-up slots of g's jobs that this
// replica does not run as g did: a live replica of g's table records them
// (it reads g's entry too); with none, they keep no record (ERROR).
func (r *runner) logUnlike(reg slot.Registry, g slot.Replica, unlike []string) {
	attrs := []any{"peer", g.ID, "seen", g.Seen.UTC().Format(time.RFC3339), "jobs", len(unlike), "slotcron.job", unlike[0]}
	for _, p := range reg.Replicas {
		if p.Table == g.Table && reg.Now.Sub(p.Seen) <= r.s.staleAfter() {
			r.log.Info(g.ID+" stopped heartbeating before its catch-up was done, and ran another table: the catch-up slots "+
				"of its jobs that this replica runs otherwise are left to "+p.ID+", of its table", append(attrs, "holder", p.ID)...)
			return
		}
	}
	r.log.Error(g.ID+" stopped heartbeating before its catch-up was done, and ran another table (a deploy under way?): "+
		"the unreached catch-up slots of its jobs that this replica runs otherwise, or not at all, keep no record, "+
		"unless a replica of its table reads its entry before it is removed", attrs...)
}

// errNotYet is settle's error while a slot's misfire grace has not passed.
var errNotYet = errors.New("a slot's misfire grace has not passed yet on Redis's clock")

// settle records the unreached catch-up slots of g's jobs in jobs, g gone
// from reg. It leaves the slots that this replica holds in its own
// catch-up (all its jobs', not only those a heartbeat lists), and those
// that a live peer running the job as this replica does (holders)
// publishes in its own (seen within the stale window: a peer counted on
// that is dead too has an entry of its own, settled once it is stale).
// Slots go out maxBatch at a time, as they are made.
func (r *runner) settle(ctx context.Context, reg slot.Registry, g slot.Replica, jobs []*jobState) error {
	live := catchupPeers(reg, r.self, "", r.s.staleAfter()) // any table's: holders chooses, job by job
	own := r.s.catchups.all()
	var (
		refs                  []slot.Ref
		js                    []*jobState
		expired               []bool      // per slot: planned a retention ago
		stale                 []*jobState // a job per slot past the retention with no record
		held, recorded, early int
		err                   error
	)
	flush := func() {
		defer func() { refs, js, expired = refs[:0], js[:0], expired[:0] }()
		if len(refs) == 0 || err != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, r.s.cfg.claimTimeout)
		defer cancel()
		var missing []int
		if missing, err = r.s.claimer.Missing(cctx, refs); err != nil {
			return
		}
		claims := make([]slot.Claim, 0, len(missing))
		for _, i := range missing {
			if expired[i] {
				stale = append(stale, js[i])
				continue
			}
			c := r.bareClaim(slot.ClaimMiss, js[i], refs[i].At)
			c.Reason = goneReason(g.ID)
			claims = append(claims, c)
		}
		if len(claims) == 0 {
			return
		}
		var res []slot.Result
		res, err = r.claimCounted(cctx, claims)
		for k := range claims {
			switch {
			case err != nil:
			case res[k].Err != nil:
				err = res[k].Err
			case res[k].Outcome == slot.OutcomeMissed:
				recorded++
			case res[k].Outcome == slot.OutcomeEarly:
				early++
			}
		}
	}
	for _, j := range jobs {
		rg, ok := g.Catchup[j.Name]
		if !ok {
			continue
		}
		// The slots were planned after g started, with no record then; a
		// retention (less twice max_skew) later, a record written since may
		// have expired, and a slot that ran would be recorded missed. Those
		// with a record are done with; those with none keep none (ERROR).
		old := reg.Now.Sub(g.Started) > j.Retention-2*r.s.cfg.maxSkew
		peers := holders(live, j, r.s.table.Table, g.Table)
		n := 0
		for at := rg.From; !at.IsZero() && !at.After(rg.To) && n < MaxCatchupSlots && err == nil; at = j.sched.Next(at) {
			n++
			if mine, ok := own[j.Name]; (ok && mine.Holds(at)) || carrier(peers, j.Name, at) != "" {
				held++
				continue
			}
			refs, js, expired = append(refs, slot.Ref{Job: j.Name, At: at}), append(js, j), append(expired, old)
			if len(refs) == maxBatch {
				flush()
			}
		}
	}
	flush()
	if err == nil && early > 0 {
		err = fmt.Errorf("%w (%d slots)", errNotYet, early)
	}
	if err != nil {
		r.logGone(g, recorded, held, nil)
		return err
	}
	for _, j := range stale {
		r.s.tel.claimed(r.s.tel.metricsOf(j.Name), outcomeStale)
	}
	r.logGone(g, recorded, held, stale)
	return nil
}

// holders returns the peers of live that may run j's slots in their
// catch-up as this replica would: those of this replica's table, those of
// g's table (settle reads only the jobs that g ran as this replica does),
// and those of another (a deploy under way) that list j with the same
// settings.
func holders(live []slot.Replica, j *jobState, mine, gs string) []slot.Replica {
	var out []slot.Replica
	for _, p := range live {
		if _, ok := p.Catchup[j.Name]; ok && (p.Table == mine || p.Table == gs || (p.Jobs != nil && p.Jobs[j.Name] == settings(j.Job))) {
			out = append(out, p)
		}
	}
	return out
}

// logGone says what settle did of g's catch-up: at WARN when it recorded
// slots, at ERROR when it left some with no record (stale: a job per slot).
func (r *runner) logGone(g slot.Replica, recorded, held int, stale []*jobState) {
	attrs := []any{"peer", g.ID, "seen", g.Seen.UTC().Format(time.RFC3339), "recorded", recorded, "left_to_live_catchups", held}
	switch {
	case len(stale) > 0:
		r.log.Error(g.ID+" stopped heartbeating before its catch-up was done: its unreached slots planned a retention ago "+
			"that have no record keep none (a record of a slot that ran may have expired since: they are not recorded missed)",
			append(attrs, "past_retention", len(stale), "slotcron.job", stale[0].Name)...)
	case recorded > 0:
		r.log.Warn(g.ID+" stopped heartbeating before its catch-up was done (killed, or paused past the stale window): "+
			"recorded missed the slots it had not reached", attrs...)
	}
}

// pendingGone logs at ERROR, as this replica stops, the gone replicas'
// entries it could not settle: unless another live replica settles them
// before they are removed, their unreached slots keep no record.
func (r *runner) pendingGone() {
	r.s.peers.mu.Lock()
	defer r.s.peers.mu.Unlock()
	for key, g := range r.s.peers.gone {
		if !r.settled[key] && !(g.ID == r.self && g.Instance == r.s.instance) {
			r.log.Error("stopping before the catch-up slots that "+g.ID+" had not reached were recorded: "+
				"they keep no record unless a live replica of the table reads its entry", "peer", g.ID,
				"seen", g.Seen.UTC().Format(time.RFC3339))
		}
	}
}

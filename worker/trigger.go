package worker

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// triggerCmd runs a manual slot of job in this process and waits for it; see
// scheduler.RunManual. It prints what happened, and the run's record.
func triggerCmd(ctx context.Context, cfg *Config, rdb redis.UniversalClient, reg *jobs.Registry, job string, m slot.Manual, out, stderr io.Writer) int {
	var names []string
	for _, jc := range cfg.Jobs {
		names = append(names, jc.Name)
	}
	switch {
	case !slices.Contains(names, job):
		fmt.Fprintf(stderr, "worker trigger: no job %q in the cron table; it has: %s\n", job, strings.Join(names, ", "))
		return 2
	case m.ID != "" && slot.CheckManualID(m.ID) != nil:
		fmt.Fprintf(stderr, "worker trigger: -key: %v\n", slot.CheckManualID(m.ID))
		return 2
	case slot.CheckNote("-note", m.Note) != nil:
		fmt.Fprintf(stderr, "worker trigger: %v\n", slot.CheckNote("-note", m.Note))
		return 2
	}
	if !reachable(ctx, cfg, rdb, "trigger", stderr) {
		return 1
	}
	// Its overlap, lease and retention must be the deployment's: another
	// overlap could run the job beside a replica's run.
	if store, err := slotstore.New(rdb, cfg.Redis.KeyPrefix); err != nil {
		fmt.Fprintf(stderr, "worker trigger: %v\n", err)
		return 1
	} else if reg, err := store.Registry(ctx, 3*scheduler.DefaultHeartbeatEvery); err != nil {
		fmt.Fprintf(stderr, "worker trigger: %v\n", err)
		return 1
	} else if why, err := otherSettings(ctx, cfg, store, reg.Replicas, job); err != nil {
		fmt.Fprintf(stderr, "worker trigger: %v\n", err)
		return 1
	} else if why != "" {
		fmt.Fprintf(stderr, "worker trigger: %s: trigger it with the config the replicas run (mid-deploy, once every replica runs this one)\n", why)
		return 2
	}
	s, done, err := oneShot(ctx, cfg, rdb, reg, "trigger", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "worker trigger: %v\n", err)
		return 1
	}
	defer done()
	m, res, err := s.RunManual(ctx, job, m)
	switch {
	case err != nil && res.Outcome == "":
		fmt.Fprintf(stderr, "worker trigger: %v\n", err)
		return 1
	case res.Err != nil:
		fmt.Fprintf(stderr, "worker trigger: the claim failed: %v\n", res.Err)
		return 1
	}
	fmt.Fprintf(out, "trigger %s: manual slot %s\n", job, m.ID)
	store, _ := slotstore.New(rdb, cfg.Redis.KeyPrefix) // the prefix was checked by oneShot
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rec, ok, rerr := store.ManualRecord(rctx, job, m.ID)
	switch {
	case res.Outcome == slot.OutcomeWon && res.State == "": // stopped (Ctrl-C) before its run ended
		fmt.Fprintf(out, "ran here as %s: still running when the trigger stopped; its record says how it ended\n", s.ReplicaID())
	case res.Outcome == slot.OutcomeWon:
		fmt.Fprintf(out, "ran here as %s: %s\n", s.ReplicaID(), res.State)
	case res.Outcome == slot.OutcomeLost:
		fmt.Fprintf(out, "not run: the key %s has a record already, %s by %s; a key runs once", m.ID, res.State, res.Holder)
		if !asked(res.State) {
			fmt.Fprint(out, ": trigger it with another key")
		}
		fmt.Fprintln(out)
	case res.Outcome == slot.OutcomeSkipped:
		fmt.Fprintf(out, "not run: recorded skipped, since the job's overlap is skip and a run holds the job (on %s); "+
			"the key %s has that record now (a key runs once): trigger it with another key once that run has ended\n", res.Holder, m.ID)
	case res.Outcome == slot.OutcomePaused:
		fmt.Fprintf(out, "not run: recorded paused, since the job is paused; the key %s has that record now (a key runs once): "+
			"resume the job, then trigger it with another key\n", m.ID)
	}
	if rerr != nil {
		fmt.Fprintf(stderr, "worker trigger: reading the record: %v\n", rerr)
		return 1
	}
	if ok {
		fmt.Fprintf(out, "record: %s, owner %s, attempt %d, fence %d, run %s, took %s\n", rec.State, rec.Owner, rec.Attempt, rec.Fence,
			orDash(rec.RunID), duration(rec))
		if text := resultOrError(rec); text != "" && text != "-" {
			fmt.Fprintf(out, "  %s\n", text)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker trigger: stopped: %v\n", err)
		return 1
	}
	switch {
	case res.Outcome == slot.OutcomeWon && res.State != slot.StateDone: // it failed, or was left running
		return 1
	case res.Outcome == slot.OutcomeLost && !asked(res.State), // the key's run did not happen, or failed
		res.Outcome == slot.OutcomeSkipped, res.Outcome == slot.OutcomePaused:
		return exitKeyUsed
	}
	return 0
}

// exitKeyUsed is trigger's exit code when the key has a record of a slot
// that did not run, or failed: asking again with that key will never run
// it, so a script that retries on failure must stop, or take another key.
const exitKeyUsed = 3

// asked reports whether a key's record in state st is what the key asked
// for: its run is done, or under way. Asking again for such a key succeeds
// (exit 0): a script may retry with the same key after a failure to reach
// Redis (exit 1) until it succeeds, or until the key is used (exit 3).
func asked(st slot.State) bool {
	return st == slot.StateDone || st == slot.StateRunning
}

package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// backfillArgs are worker backfill's flags.
type backfillArgs struct {
	from, to string
	dryRun   bool
	parallel int
}

// backfill runs job, in this process, for each of its slots within
// [from, to] that never started (no record, or recorded missed), oldest
// first; see scheduler.Backfill.
func backfill(ctx context.Context, cfg *Config, rdb redis.UniversalClient, reg *jobs.Registry, job string, a backfillArgs, out, stderr io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "worker backfill: "+format+"\n", args...)
		return 2
	}
	var jc *JobConfig
	var names []string
	for i := range cfg.Jobs {
		names = append(names, cfg.Jobs[i].Name)
		if cfg.Jobs[i].Name == job {
			jc = &cfg.Jobs[i]
		}
	}
	if jc == nil {
		return fail("no job %q in the cron table; it has: %s", job, strings.Join(names, ", "))
	}
	from, err1 := time.Parse(time.RFC3339, a.from)
	to, err2 := time.Parse(time.RFC3339, a.to)
	switch {
	case a.from == "" || a.to == "":
		return fail("give the range: worker backfill %s -from 2026-11-22T00:00:00Z -to 2026-11-22T12:00:00Z", job)
	case err1 != nil:
		return fail("-from %q is not an RFC 3339 time (2026-11-22T12:00:00Z)", a.from)
	case err2 != nil:
		return fail("-to %q is not an RFC 3339 time (2026-11-22T12:00:00Z)", a.to)
	case to.Before(from):
		return fail("-to %s is before -from %s", a.to, a.from)
	case a.parallel < 1:
		return fail("-parallel must be >= 1, got %d", a.parallel)
	}
	if !reachable(ctx, cfg, rdb, "backfill", stderr) {
		return 1
	}
	// The range is judged on Redis's clock, which decides the slots (and
	// scheduler.Backfill checks each slot again, against it).
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		fmt.Fprintf(stderr, "worker backfill: reading Redis's clock: %v\n", err)
		return 1
	}
	if to.After(now) {
		return fail("-to %s is in the future on Redis's clock (%s): its slots are the scheduler's", a.to, now.UTC().Format(time.RFC3339))
	}
	// A slot record lives for the job's retention: past it, "no record"
	// no longer means "never ran", and a backfill would run it again.
	retention := jc.schedulerJob().WithDefaults(cfg.Lease.TTL).Retention
	if oldest := now.Add(-retention).Add(time.Minute); from.Before(oldest) {
		return fail("-from %s is older than the job's retention (%v) allows on Redis's clock: its slots' records may have expired, and a slot that ran would run again; use -from %s or later",
			a.from, retention, oldest.UTC().Truncate(time.Minute).Add(time.Minute).Format(time.RFC3339))
	}
	sched, _ := scheduler.ParseSchedule(jc.Schedule) // validated with the config
	var slots []time.Time
	for t := sched.Next(from.Add(-time.Second)); !t.IsZero() && !t.After(to); t = sched.Next(t) {
		if len(slots) == scheduler.MaxCatchupSlots {
			return fail("[%s, %s] holds more than %d slots of %q; backfill a shorter range at a time", a.from, a.to, scheduler.MaxCatchupSlots, jc.Schedule)
		}
		slots = append(slots, t)
	}
	store, err := slotstore.New(rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// A paused job's claims record paused: a backfill would use its gaps up.
	if pauses, err := store.Pauses(ctx, []string{job}); err != nil {
		fmt.Fprintf(stderr, "worker backfill: %v\n", err)
		return 1
	} else if p, ok := pauses[job]; ok {
		return fail("%s is paused (by %s: %s): resume it first, or its gaps would be recorded paused", job, p.By, p.Note)
	}
	// With no replica live, the slots of the outage are not recorded yet:
	// replicas that start after a backfill of its latest part would catch up
	// only after it, and leave the earlier ones without a record.
	if reg, err := store.Registry(ctx, 3*scheduler.DefaultHeartbeatEvery); err != nil {
		fmt.Fprintf(stderr, "worker backfill: %v\n", err)
		return 1
	} else if len(reg.Replicas) == 0 && !a.dryRun {
		return fail("no replica is live: start the workers first (they record the slots they missed as their catch-up policy says), then backfill what is left")
	} else if why, err := otherSettings(ctx, cfg, store, reg.Replicas, job); err != nil {
		fmt.Fprintf(stderr, "worker backfill: %v\n", err)
		return 1
	} else if why != "" {
		// A backfill with another schedule would run slots the deployment
		// never scheduled (another overlap, lease or retention, judge them
		// otherwise).
		return fail("%s: backfill with the config the replicas run (mid-deploy, once every replica runs this one)", why)
	}
	// The slots that never started: those with no record, and those
	// recorded missed (only where no claim had won the slot: after an
	// outage longer than the catch-up window, the replicas that start again
	// record its slots so). Any other record leaves its slot alone.
	var gaps []time.Time
	missed := 0
	for _, at := range slots {
		rec, ok, err := store.Record(ctx, job, at)
		if err != nil {
			fmt.Fprintf(stderr, "worker backfill: %v\n", err)
			return 1
		}
		var line string
		switch {
		case !ok:
			gaps = append(gaps, at)
			line = "would run"
		case rec.State == slot.StateMissed:
			gaps = append(gaps, at)
			missed++
			line = "would run (recorded missed by " + rec.Owner + ")"
		default:
			line = fmt.Sprintf("left alone: %s by %s", rec.State, rec.Owner)
		}
		if a.dryRun {
			fmt.Fprintf(out, "%s  %s\n", at.UTC().Format(time.RFC3339), line)
		}
	}
	fmt.Fprintf(out, "backfill %s: %d slots of %q in [%s, %s], %d to run (%d without a record, %d recorded missed)\n",
		job, len(slots), jc.Schedule, a.from, a.to, len(gaps), len(gaps)-missed, missed)
	if a.dryRun || len(gaps) == 0 {
		return 0
	}

	s, done, err := oneShot(ctx, cfg, rdb, reg, "backfill", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "worker backfill: %v\n", err)
		return 1
	}
	defer done()
	results, err := s.Backfill(ctx, job, gaps, a.parallel)
	ran, failed, states := 0, 0, map[slot.State]int{}
	for _, r := range results {
		line := fmt.Sprintf("%s  ", r.Slot.UTC().Format(time.RFC3339))
		switch {
		case r.Err != nil:
			failed++
			line += "claim failed: " + r.Err.Error()
		case r.Outcome == slot.OutcomeWon && r.State == "": // stopped (Ctrl-C) before its run ended
			ran++
			states[slot.StateRunning]++
			line += "ran: still running when the backfill stopped; its record says how it ended"
		case r.Outcome == slot.OutcomeWon:
			ran++
			states[r.State]++
			line += "ran: " + string(r.State)
		case r.Outcome == "":
			line += "not reached"
		case r.Outcome == slot.OutcomePaused:
			line += "recorded paused: the job was paused meanwhile"
		default: // a replica, or another backfill, ran it or recorded it otherwise meanwhile
			line += fmt.Sprintf("left alone: %s (%s by %s)", r.Outcome, r.State, r.Holder)
		}
		fmt.Fprintln(out, line)
	}
	var summary []string
	for _, st := range slices.Sorted(maps.Keys(states)) {
		summary = append(summary, fmt.Sprintf("%d %s", states[st], st))
	}
	fmt.Fprintf(out, "backfill %s: ran %d of %d (%s)\n", job, ran, len(gaps), strings.Join(summary, ", "))
	if err != nil {
		fmt.Fprintf(stderr, "worker backfill: stopped: %v\n", err)
		return 1
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "worker backfill: the claims of %d slots failed (above)\n", failed)
		return 1
	}
	if notDone := ran - states[slot.StateDone]; notDone > 0 { // failed, abandoned, or left running: the work is not done
		fmt.Fprintf(stderr, "worker backfill: %d of the %d slots it ran did not end done (above)\n", notDone, ran)
		return 1
	}
	return 0
}

// oneShot returns a scheduler for a command that runs slots in this process
// without running the table (backfill, trigger), as replica
// "<what>-<hostname>-<pid>", with the worker's telemetry and JSON logs on
// stderr; done flushes the telemetry.
func oneShot(ctx context.Context, cfg *Config, rdb redis.UniversalClient, reg *jobs.Registry, what string, stderr io.Writer) (*scheduler.Scheduler, func(), error) {
	tel, err := NewTelemetry(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: %w", err)
	}
	done := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tel.Shutdown(sctx)
	}
	var storeOpts []slotstore.Option
	if cfg.Redis.WaitReplicas > 0 {
		storeOpts = append(storeOpts, slotstore.WithWaitReplicas(cfg.Redis.WaitReplicas, cfg.Redis.WaitTimeout))
	}
	store, err := slotstore.New(rdb, cfg.Redis.KeyPrefix, storeOpts...)
	if err != nil {
		done()
		return nil, nil, err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	s, err := scheduler.New(store, reg, schedulerOptions(cfg, what+"-"+scheduler.DefaultReplicaID(), log, tel)...)
	if err != nil {
		done()
		return nil, nil, err
	}
	return s, done, nil
}

// otherSettings says how a live replica among reps runs job otherwise than
// cfg would (mid-deploy, the config of a one-shot command may not be the
// one the replicas run): "replica r1 runs job with other settings ...", or
// "" when none does. A replica of the same table agrees; one whose table is
// too large to list its jobs, or of a version before the lists, is not
// judged.
func otherSettings(ctx context.Context, cfg *Config, store *slotstore.Store, reps []slot.Replica, job string) (string, error) {
	table := map[string]string{}
	for _, c := range cfg.Jobs {
		table[c.Name] = scheduler.JobSettings(c.schedulerJob().WithDefaults(cfg.Lease.TTL))
	}
	mine, hash := table[job], slot.TableHash(table)
	var others []slot.Replica // those of another table: their lists are read (most often, none)
	for _, rep := range reps {
		if rep.Table != hash {
			others = append(others, rep)
		}
	}
	if err := store.JobLists(ctx, others); err != nil {
		return "", err
	}
	for _, rep := range others {
		if rep.Jobs == nil {
			continue
		}
		if theirs, ok := rep.Jobs[job]; !ok {
			return fmt.Sprintf("replica %s does not run %s", rep.ID, job), nil
		} else if theirs != mine {
			return fmt.Sprintf("replica %s runs %s with other settings than this config: it has %s; this config has %s", rep.ID, job, theirs, mine), nil
		}
	}
	return "", nil
}

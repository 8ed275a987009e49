package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// pause pauses or resumes job (sub is "pause" or "resume") on every replica
// of the deployment, through the slot store.
func pause(ctx context.Context, cfg *Config, rdb redis.UniversalClient, sub, job, note string, out, stderr io.Writer) int {
	var names []string
	for _, jc := range cfg.Jobs {
		names = append(names, jc.Name)
	}
	if !slices.Contains(names, job) {
		fmt.Fprintf(stderr, "worker %s: no job %q in the cron table; it has: %s\n", sub, job, strings.Join(names, ", "))
		return 2
	}
	if err := slot.CheckNote("-note", note); err != nil {
		fmt.Fprintf(stderr, "worker pause: %v\n", err)
		return 2
	}
	if !reachable(ctx, cfg, rdb, sub, stderr) {
		return 1
	}
	slots, err := slotstore.New(rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if sub == "resume" {
		changed, err := slots.Resume(ctx, job)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "worker resume: %v\n", err)
			return 1
		case changed:
			fmt.Fprintf(out, "resumed %s: its next slot runs\n", job)
		default:
			fmt.Fprintf(out, "%s was not paused\n", job)
		}
		return 0
	}
	p, err := pauseJob(ctx, cfg, slots, job, note, asker())
	switch {
	case errors.Is(err, errAlertNotAdded):
		fmt.Fprintf(stderr, "worker pause: paused, but %v\n", err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "worker pause: %v\n", err)
		return 1
	case p.kept != nil:
		fmt.Fprintf(out, "%s was paused already, by %s since %s: %q; left as it is (-note replaces the note)\n",
			job, p.kept.By, p.kept.At.UTC().Format(time.RFC3339), p.kept.Note)
		return 0
	}
	if p.changed {
		fmt.Fprintf(out, "paused %s: from its next slot on, every replica records its slots paused and runs none; runs in progress go on\n", job)
	} else {
		fmt.Fprintf(out, "%s was paused already; its note is now %q\n", job, note)
	}
	return 0
}

// asker names who runs the command: user@host.
func asker() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// pauseOutcome is what pauseJob did: kept is the pause that stood, left as
// it was (a pause without a note on a paused job); else changed says
// whether the job was running.
type pauseOutcome struct {
	kept    *slot.Pause
	changed bool
}

// errAlertNotAdded wraps the error of a pause whose alert could not be added
// to the outbox: the job is paused all the same.
var errAlertNotAdded = errors.New("the alert could not be added to the outbox")

// pauseJob pauses job for worker pause and the HTTP endpoint alike. A pause
// without a note, on a job that a pause holds already, leaves that pause as
// it is (its note, who asked, its time), so that a second click or a
// command sent again does not wipe its reason. Either way the pause's alert
// is added, whether or not this call changed the state: a pause whose reply
// was lost (a timeout; go-redis may have sent it again, and the second try
// found the first's pause), or that an earlier call made before it failed.
// The alert is named by the pause's time, so the outbox adds it once per
// pause.
func pauseJob(ctx context.Context, cfg *Config, store *slotstore.Store, job, note, by string) (pauseOutcome, error) {
	alert := func(note, by string, since time.Time) error {
		if err := addPaused(ctx, cfg, store, job, note, by, since); err != nil {
			return fmt.Errorf("%w: %w", errAlertNotAdded, err)
		}
		return nil
	}
	if note == "" {
		pauses, err := store.Pauses(ctx, []string{job})
		if err != nil {
			return pauseOutcome{}, err
		}
		if p, ok := pauses[job]; ok {
			return pauseOutcome{kept: &p}, alert(p.Note, p.By, p.At)
		}
	}
	changed, since, err := store.Pause(ctx, job, note, by)
	if err != nil {
		return pauseOutcome{}, err
	}
	return pauseOutcome{changed: changed}, alert(note, by, since)
}

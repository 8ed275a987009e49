package worker

import (
	"context"
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
	if note == "" { // a second pause without a note keeps the first one's reason
		pauses, err := slots.Pauses(ctx, []string{job})
		if err != nil {
			fmt.Fprintf(stderr, "worker pause: %v\n", err)
			return 1
		}
		if p, ok := pauses[job]; ok {
			// Its alert, should the pause's own have been lost with its reply.
			if err := addPaused(ctx, cfg, slots, job, p.Note, p.By, p.At); err != nil {
				fmt.Fprintf(stderr, "worker pause: paused, but the alert could not be added to the outbox: %v\n", err)
				return 1
			}
			fmt.Fprintf(out, "%s was paused already, by %s since %s: %q; left as it is (-note replaces the note)\n",
				job, p.By, p.At.UTC().Format(time.RFC3339), p.Note)
			return 0
		}
	}
	changed, since, err := slots.Pause(ctx, job, note, asker())
	if err != nil {
		fmt.Fprintf(stderr, "worker pause: %v\n", err)
		return 1
	}
	// Added whether or not this call changed the state: a pause whose reply
	// was lost (a timeout; go-redis may have sent it again, and the second
	// try found the first's pause) or that an earlier run of this command
	// made before it failed. The alert is named by the pause's time, so the
	// outbox adds it once per pause.
	if err := addPaused(ctx, cfg, slots, job, note, asker(), since); err != nil {
		fmt.Fprintf(stderr, "worker pause: paused, but the alert could not be added to the outbox: %v\n", err)
		return 1
	}
	if changed {
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

package worker

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/locking"
	"github.com/slotcron/slotcron/scheduler"
)

// status prints, per job, the run that holds its lease and its last 10 slot
// records, each with the trace ID under which Jaeger shows it.
func status(ctx context.Context, cfg *Config, rdb redis.UniversalClient, out, stderr io.Writer) int {
	slots, err := locking.NewSlots(rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, j := range cfg.Jobs {
		if i > 0 {
			fmt.Fprintln(out)
		}
		holder, slot, ttl, err := slots.Holder(ctx, j.Name)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		lease := "free"
		if holder != "" {
			lease = fmt.Sprintf("held by %s for slot %s, %v left", holder, slot.UTC().Format(time.RFC3339), ttl.Round(time.Millisecond))
		}
		fmt.Fprintf(out, "job %s  schedule %q  lease: %s\n", j.Name, j.Schedule, lease)
		recs, err := slots.Records(ctx, j.Name, 10)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if len(recs) == 0 {
			fmt.Fprintln(out, "  no slot records")
			continue
		}
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  SLOT\tSTATE\tREPLICA\tATTEMPT\tFENCE\tDURATION\tTRACE\tERROR")
		for _, r := range recs {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Slot.UTC().Format(time.RFC3339), r.State, r.Owner,
				r.Attempt, r.Fence, duration(r), scheduler.SlotTraceID(cfg.Redis.KeyPrefix, j.Name, r.Slot), firstLine(r.Error))
		}
		w.Flush()
	}
	return 0
}

func duration(r locking.SlotRecord) string {
	switch {
	case r.Started.IsZero():
		return "-"
	case r.Finished.IsZero():
		return "running"
	}
	return r.Finished.Sub(r.Started).String()
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i] + " ..."
		}
	}
	return s
}

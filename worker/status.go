package worker

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// status prints, per job, the run that holds its lease and its last 10 slot
// records, each with the trace ID under which Jaeger shows it.
func status(ctx context.Context, cfg *Config, rdb redis.UniversalClient, out, stderr io.Writer) int {
	slots, err := slotstore.New(rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := printReplicas(ctx, slots, out); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	var names []string
	for _, j := range cfg.Jobs {
		names = append(names, j.Name)
	}
	pauses, err := slots.Pauses(ctx, names)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, j := range cfg.Jobs {
		fmt.Fprintln(out)
		holder, at, ttl, err := slots.Holder(ctx, j.Name)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		lease := "free"
		if holder == "" { // a retry may have the job's turn (claim.lua): no run holds it, and none starts
			if holder, at, ttl, err = slots.Turn(ctx, j.Name); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			if holder != "" {
				what := "a manual slot"
				if !at.IsZero() {
					what = "slot " + at.UTC().Format(time.RFC3339)
				}
				lease = fmt.Sprintf("free, kept for %s's retry of %s (its owner lost its lease), %v left", holder, what, ttl.Round(time.Millisecond))
				holder = ""
			}
		}
		switch {
		case holder != "" && at.IsZero():
			lease = fmt.Sprintf("held by %s for a manual slot, %v left", holder, ttl.Round(time.Millisecond))
		case holder != "":
			lease = fmt.Sprintf("held by %s for slot %s, %v left", holder, at.UTC().Format(time.RFC3339), ttl.Round(time.Millisecond))
		}
		fmt.Fprintf(out, "job %s  schedule %q  lease: %s\n", j.Name, j.Schedule, lease)
		if p, ok := pauses[j.Name]; ok {
			fmt.Fprintf(out, "  PAUSED since %s by %s", p.At.UTC().Format(time.RFC3339), p.By)
			if p.Note != "" {
				fmt.Fprintf(out, ": %s", p.Note)
			}
			fmt.Fprintf(out, " (worker resume %s)\n", j.Name)
		}
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
		fmt.Fprintln(w, "  SLOT\tKIND\tSTATE\tREPLICA\tATTEMPT\tFENCE\tDURATION\tRUN ID\tTRACE\tRESULT OR ERROR")
		for _, r := range recs {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Slot.UTC().Format(time.RFC3339), recordKind(r), r.State, r.Owner,
				r.Attempt, r.Fence, duration(r), orDash(r.RunID), scheduler.RecordTraceID(cfg.Redis.KeyPrefix, r), resultOrError(r))
		}
		w.Flush()
	}
	return 0
}

// printReplicas prints every live replica of the deployment, and whether its
// table and its max_skew agree with the others' (replicaRows).
func printReplicas(ctx context.Context, slots *slotstore.Store, out io.Writer) error {
	rows, err := replicaRows(ctx, slots)
	if err != nil {
		return err
	}
	return printRows(rows, out)
}

// printRows prints the replicas' rows, as printReplicas does.
func printRows(rows []replicaRow, out io.Writer) error {
	fmt.Fprintf(out, "replicas: %d live\n", len(rows))
	if len(rows) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  ID\tVERSION\tPROTOCOL\tSTARTED\tLAST SEEN\tCLOCK OFFSET\tMAX SKEW\tTABLE")
	for _, r := range rows {
		offset := r.Offset.String()
		if r.Refuses {
			offset += " OVER MAX SKEW"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%v ago\t%s\t%s\t%s\n", r.ID, r.Version, r.Protocol, r.Started.UTC().Format(time.RFC3339),
			r.SeenAgo, offset, r.MaxSkew, r.Table)
	}
	return w.Flush()
}

// replicaRow is a live replica as status and the dashboard show it.
type replicaRow struct {
	ID, Version     string
	Protocol        string // its slot protocol: "2", or "1 OLDER" (newer replicas claim nothing while it is live)
	Older           bool
	Started         time.Time
	SeenAgo, Offset time.Duration
	Refuses         bool   // its clock is off Redis's by more than its max_skew: it claims nothing
	MaxSkew         string // "2s", "500ms DIFFERS from N peer(s)", or "-" (a version that does not publish it)
	SkewAgrees      bool
	Table           string // "agrees", or "DIFFERS from N peer(s)"
	Agrees          bool
}

// replicaRows returns the live replicas of the deployment, and whether each
// one's table and max_skew agree with the others' (rowsOf).
func replicaRows(ctx context.Context, slots *slotstore.Store) ([]replicaRow, error) {
	reg, err := slots.Registry(ctx, 3*scheduler.DefaultHeartbeatEvery)
	if err != nil {
		return nil, err
	}
	return rowsOf(reg), nil
}

// rowsOf is a registry's replicas as rows. For the table, and apart for
// max_skew, the largest group of replicas with one value is taken as the
// reference; a replica that publishes no max_skew (an older version)
// neither agrees nor differs.
func rowsOf(reg slot.Registry) []replicaRow {
	skews := map[time.Duration]int{}
	var refSkew time.Duration
	for _, r := range reg.Replicas {
		if r.MaxSkew <= 0 {
			continue
		}
		skews[r.MaxSkew]++
		if skews[r.MaxSkew] > skews[refSkew] {
			refSkew = r.MaxSkew
		}
	}
	tables := map[string]int{}
	table := func(r slot.Replica) string { return r.Table }
	var ref string
	for _, r := range reg.Replicas {
		t := table(r)
		tables[t]++
		if tables[t] > tables[ref] {
			ref = t
		}
	}
	rows := make([]replicaRow, len(reg.Replicas))
	for i, r := range reg.Replicas {
		rows[i] = replicaRow{ID: r.ID, Version: r.Version, Protocol: strconv.Itoa(r.Protocol), Started: r.Started, SeenAgo: reg.Now.Sub(r.Seen).Round(time.Millisecond),
			Offset: r.Offset.Round(time.Microsecond), Table: "agrees", Agrees: true}
		if r.Protocol < reg.Protocol {
			rows[i].Protocol, rows[i].Older = rows[i].Protocol+" OLDER", true
		}
		if table(r) != ref {
			rows[i].Table, rows[i].Agrees = "DIFFERS from "+strconv.Itoa(tables[ref])+" peer(s)", false
		}
		switch {
		case r.MaxSkew <= 0:
			rows[i].MaxSkew, rows[i].SkewAgrees = "-", true
		case r.MaxSkew != refSkew:
			rows[i].MaxSkew = r.MaxSkew.String() + " DIFFERS from " + strconv.Itoa(skews[refSkew]) + " peer(s)"
		default:
			rows[i].MaxSkew, rows[i].SkewAgrees = r.MaxSkew.String(), true
		}
		rows[i].Refuses = r.MaxSkew > 0 && max(r.Offset, -r.Offset) > r.MaxSkew
	}
	return rows
}

func duration(r slot.Record) string {
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

// resultOrError is a record's error, or else its result, on one line; a
// manual slot's says who asked, and why; a backfill's run of a slot
// recorded missed says what the missed record said.
func resultOrError(r slot.Record) string {
	text := r.Result
	if r.Error != "" {
		text = r.Error
	}
	if m := r.Missed; m != nil {
		was := "backfilled; was missed (" + m.By + "): " + m.Reason
		if text != "" {
			was += "; " + text
		}
		text = was
	}
	if m := r.Manual; m != nil {
		asked := "asked by " + m.By
		if m.Note != "" {
			asked += ": " + m.Note
		}
		if text == "" {
			return firstLine(asked)
		}
		return firstLine(asked + "; " + text)
	}
	return firstLine(text)
}

// recordKind is "scheduled", or "manual <id>" for a manual slot's record.
func recordKind(r slot.Record) string {
	if r.Manual != nil {
		return "manual " + r.Manual.ID
	}
	return "scheduled"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

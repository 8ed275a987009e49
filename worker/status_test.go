package worker

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestReplicaRowsMaxSkew: status and the dashboard show each replica's
// max_skew, mark the ones that differ from the most common one, show "-"
// for a replica that publishes none (an older version) without marking it,
// and say which replica's clock is past its own max_skew (it claims
// nothing), judged by its limit and not by another's.
func TestReplicaRowsMaxSkew(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	rep := func(id string, offset, maxSkew time.Duration) slot.Replica {
		return slot.Replica{ID: id, Version: "v", Protocol: 2, Started: now, Seen: now, Offset: offset, MaxSkew: maxSkew, Table: "t"}
	}
	reg := slot.Registry{Now: now, Protocol: 2, Replicas: []slot.Replica{
		rep("a", 0, 2*time.Second),
		rep("b", -time.Second, 2*time.Second),
		rep("old", 3*time.Second, 0),
		rep("strict", time.Second, 500*time.Millisecond),
	}}
	type row struct {
		maxSkew             string
		skewAgrees, refuses bool
	}
	want := map[string]row{
		"a":      {"2s", true, false},
		"b":      {"2s", true, false},
		"old":    {"-", true, false},
		"strict": {"500ms DIFFERS from 2 peer(s)", false, true},
	}
	rows := rowsOf(reg)
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		if got := (row{r.MaxSkew, r.SkewAgrees, r.Refuses}); got != want[r.ID] || !r.Agrees {
			t.Errorf("%s: max skew %q (agrees: %v), refuses: %v, table agrees: %v; want %+v and the table agreeing",
				r.ID, r.MaxSkew, r.SkewAgrees, r.Refuses, r.Agrees, want[r.ID])
		}
	}
	var out bytes.Buffer
	if err := printRows(rows, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, w := range []string{`CLOCK OFFSET +MAX SKEW +TABLE\n`, `\n  a .* 0s +2s +agrees\n`, `\n  old .* 3s +- +agrees\n`,
		`\n  strict .* 1s OVER MAX SKEW +500ms DIFFERS from 2 peer\(s\) +agrees\n`} {
		if !regexp.MustCompile(w).MatchString(text) {
			t.Errorf("status does not match %q:\n%s", w, text)
		}
	}
}

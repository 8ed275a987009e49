package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestMaxSkewDisagreements: a live peer that publishes another max_skew is a
// disagreement, whatever its table, and reads as one line naming both
// values; a peer that publishes none (an older version) is not one.
func TestMaxSkewDisagreements(t *testing.T) {
	jobs := map[string]string{"j": `schedule="@every 1s"`}
	table := slot.TableHash(jobs)
	for _, tc := range []struct {
		name         string
		mine, theirs time.Duration // 0: not published
		listed       bool          // the peer lists its jobs (else: a large table, hash only)
		want         []string
	}{
		{"stricter peer", 2 * time.Second, 500 * time.Millisecond, true,
			[]string{"replica settings: b runs with max_skew=500ms; this replica with max_skew=2s"}},
		{"laxer peer", 2 * time.Second, 5 * time.Second, true,
			[]string{"replica settings: b runs with max_skew=5s; this replica with max_skew=2s"}},
		{"large table", 2 * time.Second, 500 * time.Millisecond, false,
			[]string{"replica settings: b runs with max_skew=500ms; this replica with max_skew=2s"}},
		{"same max_skew", 2 * time.Second, 2 * time.Second, true, nil},
		{"older peer (no max_skew)", 2 * time.Second, 0, true, nil},
		{"reader that publishes none", 0, 500 * time.Millisecond, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			me := slot.Replica{ID: "a", Jobs: jobs, Table: table, MaxSkew: tc.mine}
			peer := slot.Replica{ID: "b", Table: table, MaxSkew: tc.theirs}
			if tc.listed {
				peer.Jobs = jobs
			}
			var got []string
			for _, d := range disagreements(me, "p", slot.Registry{Replicas: []slot.Replica{me, peer}}) {
				got = append(got, d.String())
				if d.Job != "" || d.Peer != "b" {
					t.Errorf("disagreement %+v: want Job \"\" and Peer b", d)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("disagreements %q, want %q", got, tc.want)
			}
		})
	}
	// Beside a job's, it comes first, and names only the replica's settings.
	other := map[string]string{"j": `schedule="@every 2s"`}
	me := slot.Replica{ID: "a", Jobs: jobs, Table: table, MaxSkew: 2 * time.Second}
	peer := slot.Replica{ID: "b", Jobs: other, Table: slot.TableHash(other), MaxSkew: time.Second}
	var got []string
	for _, d := range disagreements(me, "p", slot.Registry{Replicas: []slot.Replica{me, peer}}) {
		got = append(got, d.String())
	}
	want := []string{
		"replica settings: b runs with max_skew=1s; this replica with max_skew=2s",
		`job j: b runs it with schedule="@every 2s"; this replica with schedule="@every 1s"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("disagreements %q, want %q", got, want)
	}
}

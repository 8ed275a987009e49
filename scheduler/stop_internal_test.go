package scheduler

import (
	"testing"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// TestCatchupCarriers: a stopping replica leaves a catch-up slot to a peer
// only when that peer is live (seen within the last heartbeat and a half),
// runs the same table, and publishes a catch-up range of the job that holds
// the slot; itself, after a Leave whose reply was lost, does not count.
func TestCatchupCarriers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := now.Add(-time.Hour)
	holds := map[string]slot.CatchupRange{"j": {From: at.Add(-time.Minute), To: at.Add(time.Minute)}}
	reg := slot.Registry{Now: now, Replicas: []slot.Replica{
		{ID: "me", Table: "t", Seen: now, Catchup: holds},
		{ID: "other-table", Table: "u", Seen: now, Catchup: holds},
		{ID: "stale", Table: "t", Seen: now.Add(-8 * time.Second), Catchup: holds},
		{ID: "idle", Table: "t", Seen: now},
		{ID: "later", Table: "t", Seen: now, Catchup: map[string]slot.CatchupRange{"j": {From: at.Add(time.Second), To: at.Add(time.Minute)}}},
		{ID: "other-job", Table: "t", Seen: now, Catchup: map[string]slot.CatchupRange{"k": holds["j"]}},
	}}
	peers := catchupPeers(reg, "me", "t", 7500*time.Millisecond)
	var ids []string
	for _, p := range peers {
		ids = append(ids, p.ID)
	}
	if len(ids) != 2 || ids[0] != "later" || ids[1] != "other-job" {
		t.Fatalf("peers %v; want later and other-job", ids)
	}
	for _, tc := range []struct {
		job  string
		at   time.Time
		want string
	}{
		{"j", at, ""}, // later's range begins after it
		{"j", at.Add(time.Second), "later"},
		{"j", at.Add(time.Minute), "later"},
		{"j", at.Add(time.Minute + time.Second), ""},
		{"k", at, "other-job"},
		{"l", at, ""},
	} {
		if got := carrier(peers, tc.job, tc.at); got != tc.want {
			t.Errorf("carrier of %s at %v: %q; want %q", tc.job, tc.at.Sub(at), got, tc.want)
		}
	}
	reg.Replicas = append(reg.Replicas, slot.Replica{ID: "fresh", Table: "t", Seen: now.Add(-7 * time.Second), Catchup: holds})
	if got := carrier(catchupPeers(reg, "me", "t", 7500*time.Millisecond), "j", at); got != "fresh" {
		t.Errorf("carrier with a peer seen 7s ago: %q; want fresh", got)
	}
}

package scheduler

import (
	"testing"

	"github.com/slotcron/slotcron/slot"
)

// RootSpanNames is every name a slot's root span may end with, written out:
// a new outcome or kind must be added here on purpose. Exported for the
// package's external tests.
var RootSpanNames = func() map[string]bool {
	names := map[string]bool{}
	for _, kind := range []string{"slot", "slot.watch", "slot.manual", "slot.backfill"} {
		for _, o := range []string{"won", "lost", "skipped", "busy", "missed", "alive", "abandoned",
			"closed", "gone", "early", "paused", "error", "refused_skew", "unknown"} {
			names[kind+" "+o] = true
		}
	}
	return names
}()

// TestSpanRootName: the root span's name is its kind and the outcome, and
// nothing an answer carries (a replica, a holder, a new outcome) adds a name.
func TestSpanRootName(t *testing.T) {
	for _, tc := range []struct{ kind, outcome, want string }{
		{kindSlot, "won", "slot won"},
		{kindSlot, "lost", "slot lost"},
		{kindSlot, "skipped", "slot skipped"},
		{kindSlot, "missed", "slot missed"},
		{kindSlot, outcomeRefused, "slot refused_skew"},
		{kindSlot, outcomeError, "slot error"},
		{kindWatch, "alive", "slot.watch alive"},
		{kindManual, "won", "slot.manual won"},
		{kindBackfill, "paused", "slot.backfill paused"},
		{kindBackfill, "throttled", "slot.backfill unknown"}, // an outcome this version does not know
		{kindSlot, "replica-1", "slot unknown"},
		{kindSlot, "", "slot unknown"},
	} {
		if got := rootName(tc.kind, tc.outcome); got != tc.want {
			t.Errorf("rootName(%q, %q) = %q, want %q", tc.kind, tc.outcome, got, tc.want)
		}
	}
	seen := map[string]bool{}
	for _, kind := range []string{kindSlot, kindWatch, kindManual, kindBackfill} {
		for _, o := range append([]string{outcomeError, outcomeRefused, "throttled", "won to replica-2"}, outcomeStrings()...) {
			name := rootName(kind, o)
			if !RootSpanNames[name] {
				t.Errorf("rootName(%q, %q) = %q: not one of the %d names", kind, o, name, len(RootSpanNames))
			}
			seen[name] = true
		}
	}
	if len(seen) != len(RootSpanNames) {
		t.Errorf("%d names reachable, %d listed: %v", len(seen), len(RootSpanNames), seen)
	}
}

func outcomeStrings() []string {
	var out []string
	for _, o := range slot.Outcomes {
		out = append(out, string(o))
	}
	return out
}

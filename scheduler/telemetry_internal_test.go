package scheduler

import (
	"slices"
	"testing"

	"github.com/slotcron/slotcron/slot"
)

// TestMetricNamesCoverTheStore: a job's metric options are looked up by
// index among outcomeNames and stateNames, so those must name every outcome
// and run state the store has (an unknown one still works, through a map).
func TestMetricNamesCoverTheStore(t *testing.T) {
	for _, o := range slot.Outcomes {
		if !slices.Contains(outcomeNames[:], string(o)) {
			t.Errorf("outcome %q is not in outcomeNames", o)
		}
	}
	for _, st := range slot.RunStates {
		if !slices.Contains(stateNames[:], string(st)) {
			t.Errorf("run state %q is not in stateNames", st)
		}
	}
	m := newJobMetrics("j")
	if a, b := m.outcome("won"), m.outcome("won"); len(a) != 1 || &a[0] != &b[0] {
		t.Fatal("an outcome's options are built again on each use")
	}
	if a, b := m.outcome("new-outcome"), m.outcome("new-outcome"); len(a) != 1 || &a[0] != &b[0] {
		t.Fatal("an unknown outcome's options are built again on each use")
	}
}

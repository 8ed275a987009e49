package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

// wallClock applies Vixie cron's daylight-saving rules to an expression with
// a fixed hour field. robfig/cron alone skips a time that a spring-forward
// change removes (a 02:30 job does not run that day) and runs a time that a
// fall-back change repeats twice (a 01:30 job runs twice).
type wallClock struct{ spec *cron.SpecSchedule }

func (w wallClock) Next(t time.Time) time.Time {
	for range 1000 { // each pass skips one repeated time; a handful at most
		n := w.spec.Next(t)
		if n.IsZero() {
			return n
		}
		if gap, ok := w.skippedBefore(t, n); ok {
			return gap
		}
		if !repeated(n.In(w.spec.Location)) { // robfig answers in t's location
			return n
		}
		t = n
	}
	return time.Time{}
}

// skippedBefore returns the instant of a spring-forward change in (t, n) whose
// skipped wall-clock times include a time of the expression: that time runs
// at the change.
func (w wallClock) skippedBefore(t, n time.Time) (time.Time, bool) {
	for cur := t.In(w.spec.Location); ; {
		_, change := cur.ZoneBounds()
		if change.IsZero() || !change.Before(n) {
			return time.Time{}, false
		}
		_, before := cur.Zone()
		_, after := change.Zone()
		if after > before {
			// Wall times [change, change+gap) in the old offset did not exist.
			gap := time.Duration(after-before) * time.Second
			fixed := *w.spec
			fixed.Location = time.FixedZone("before", before)
			if m := fixed.Next(change.Add(-time.Second)); m.Before(change.Add(gap)) {
				return change, true
			}
		}
		cur = change
	}
}

// repeated reports whether n is the second occurrence of its wall-clock time,
// in the hour that a fall-back change repeats.
func repeated(n time.Time) bool {
	start, _ := n.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, now := n.Zone()
	_, before := start.Add(-time.Second).Zone()
	if before <= now {
		return false
	}
	return n.Before(start.Add(time.Duration(before-now) * time.Second))
}

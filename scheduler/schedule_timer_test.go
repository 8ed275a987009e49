package scheduler

import (
	"math"
	"testing"
	"time"
)

// The precise timer is where a slot's due time becomes a wait: any duration
// the dispatcher can compute must work, including the saturated
// due.Sub(now) of a zero (never) due time and a due time centuries away.
// (It belongs beside clock_test.go, which is an external test package.)
func TestPreciseTimerAnyDuration(t *testing.T) {
	fires := map[string]time.Duration{
		"most negative":            math.MinInt64,
		"most negative + the lead": math.MinInt64 + preciseLead,
		"zero due time minus now":  time.Time{}.Sub(time.Now()),
		"an hour ago":              -time.Hour,
		"zero":                     0,
		"1ns":                      1,
		"just under the lead":      preciseLead - 1,
		"the lead":                 preciseLead,
		"3ms":                      3 * time.Millisecond,
	}
	for name, d := range fires {
		start := time.Now()
		tm := newPreciseTimer(d)
		select {
		case fired := <-tm.C():
			if early := d - fired.Sub(start); d > 0 && early > 0 {
				t.Errorf("%s (%v): fired %v early", name, d, early)
			}
		case <-time.After(time.Second):
			t.Errorf("%s (%v): not fired after 1s", name, d)
		}
		tm.Stop()
	}
	waits := map[string]time.Duration{
		"most positive":     math.MaxInt64,
		"year 9999":         time.Until(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)),
		"most positive - 1": math.MaxInt64 - 1,
		"an hour":           time.Hour,
	}
	for name, d := range waits {
		tm := newPreciseTimer(d)
		select {
		case <-tm.C():
			t.Errorf("%s (%v): fired at once", name, d)
		case <-time.After(20 * time.Millisecond):
		}
		if !tm.Stop() {
			t.Errorf("%s (%v): Stop of a pending timer returned false", name, d)
		}
	}
}

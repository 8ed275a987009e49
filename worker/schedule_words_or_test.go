package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/scheduler"
)

// TestDescribeScheduleDayOfMonthOrWeekday: with both day-of-month and
// day-of-week restricted, cron (robfig, Vixie) runs on either day. The
// dashboard must not describe "0 0 12 13 * FRI" as Friday the 13th.
func TestDescribeScheduleDayOfMonthOrWeekday(t *testing.T) {
	const expr = "0 0 12 13 * FRI"
	sched, err := scheduler.ParseSchedule(expr)
	if err != nil {
		t.Fatal(err)
	}
	// What the scheduler does: 2026-11-13 is a Friday; the next slots
	// after it are every Friday and every 13th, not only Friday the 13ths.
	var next []string
	for t0, i := time.Date(2026, 11, 13, 12, 0, 0, 0, time.UTC), 0; i < 4; i++ {
		t0 = sched.Next(t0)
		next = append(next, t0.Format("Mon 2006-01-02"))
	}
	words := describeSchedule(expr)
	t.Logf("slots after 2026-11-13: %v", next)
	if next[0] == "Fri 2026-11-20" && !strings.Contains(words, " or ") {
		t.Errorf("describeSchedule(%q) = %q, which reads as Friday the 13th; the schedule runs every Friday and every 13th (next: %s)",
			expr, words, strings.Join(next, ", "))
	}
}

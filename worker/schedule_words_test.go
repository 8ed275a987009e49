package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/scheduler"
)

func TestDescribeSchedule(t *testing.T) {
	for expr, want := range map[string]string{
		"0 0 12 * * *":                      "every day at 12:00 UTC",
		"30 15 9 * * *":                     "every day at 09:15:30 UTC",
		"*/5 * * * *":                       "every 5 minutes",
		"* * * * * *":                       "every second",
		"*/10 * * * * *":                    "every 10 seconds",
		"0 */15 9-17 * * MON-FRI":           "every 15 minutes, during hours 9-17, on Monday to Friday UTC",
		"CRON_TZ=Europe/Paris 0 0 12 * * *": "every day at 12:00 Europe/Paris",
		"0 0 1 * *":                         "at 00:00, on day 1 of the month UTC",
		"0 30 8 * * 1,3":                    "at 08:30, on Monday, Wednesday UTC",
		"0 0 0 1 JAN *":                     "at 00:00, on day 1 of the month, in January UTC",
		"0 0 12 13 * FRI":                   "at 12:00, on day 13 of the month or on Friday UTC",
		"@every 10s":                        "every 10s",
		"@daily":                            "every day at 00:00 UTC",
		"@hourly":                           "every hour, on the hour",
		"CRON_TZ=America/New_York @weekly":  "every Sunday at 00:00 America/New_York",
		"0 5 * * * *":                       "at minute 5 of every hour",
		"0 0 */2 * * *":                     "at minute 0, every 2 hours UTC",
		"not a schedule":                    "not a schedule",
	} {
		if got := describeSchedule(expr); got != want {
			t.Errorf("%q: %q, want %q", expr, got, want)
		}
	}
}

// TestScheduleWithBothDayFieldsRunsOnEither: with both day-of-month and
// day-of-week restricted, cron (robfig, Vixie) runs on either day, as
// TestDescribeSchedule's words for "0 0 12 13 * FRI" say ("or"; they read
// as Friday the 13th before).
func TestScheduleWithBothDayFieldsRunsOnEither(t *testing.T) {
	sched, err := scheduler.ParseSchedule("0 0 12 13 * FRI")
	if err != nil {
		t.Fatal(err)
	}
	var next []string
	for at, i := time.Date(2026, 11, 13, 12, 0, 0, 0, time.UTC), 0; i < 4; i++ { // Friday the 13th
		at = sched.Next(at)
		next = append(next, at.Format("Mon 2006-01-02"))
	}
	if got, want := strings.Join(next, ", "), "Fri 2026-11-20, Fri 2026-11-27, Fri 2026-12-04, Fri 2026-12-11"; got != want {
		t.Errorf("slots after Friday 2026-11-13: %s; want %s (every Friday and every 13th)", got, want)
	}
}

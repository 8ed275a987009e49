package worker

import "testing"

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

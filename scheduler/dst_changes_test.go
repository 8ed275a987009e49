package scheduler

import (
	"strings"
	"testing"
)

// TestDSTOddZones pins the daylight-saving rules in zones whose changes are
// not a whole hour at 02:00. Pacific/Chatham moves 03:45 +1345 -> 02:45 +1245
// on 2026-04-05 (14:00Z) and 02:45 +1245 -> 03:45 +1345 on 2026-09-27
// (2026-09-26T14:00Z). Australia/Lord_Howe moves 02:00 +11 -> 01:30 +1030 on
// 2026-04-05 (2026-04-04T15:00Z) and 02:00 +1030 -> 02:30 +11 on 2026-10-04
// (2026-10-03T15:30Z).
func TestDSTOddZones(t *testing.T) {
	tests := []struct {
		name, spec, from string
		want             []string
	}{
		{"Chatham: 03:45 exists once, after the repeated hour",
			"CRON_TZ=Pacific/Chatham 45 3 * * *", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T15:00:00Z" /* 03:45 +1245 */, "2026-04-05T15:00:00Z"}},
		{"Chatham: from the change itself",
			"CRON_TZ=Pacific/Chatham 45 3 * * *", "2026-04-04T14:00:00Z",
			[]string{"2026-04-04T15:00:00Z", "2026-04-05T15:00:00Z"}},
		{"Chatham: the repeated 02:45 runs at its first occurrence",
			"CRON_TZ=Pacific/Chatham 45 2 * * *", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T13:00:00Z" /* 02:45 +1345 */, "2026-04-05T14:00:00Z" /* 02:45 +1245 */}},
		{"Chatham: the skipped 02:45 and the 03:45 after the jump run once",
			"CRON_TZ=Pacific/Chatham 45 2,3 * * *", "2026-09-26T00:00:00Z",
			[]string{"2026-09-26T14:00:00Z", "2026-09-27T13:00:00Z", "2026-09-27T14:00:00Z"}},
		{"Chatham: a wildcard hour follows real time",
			"CRON_TZ=Pacific/Chatham 45 * * * *", "2026-04-04T13:30:00Z",
			[]string{"2026-04-04T14:00:00Z" /* 02:45 +1245 */, "2026-04-04T15:00:00Z"}},
		{"Lord Howe: midnight daily after the fall-back",
			"CRON_TZ=Australia/Lord_Howe 0 0 * * *", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z", "2026-04-06T13:30:00Z"}},
		{"Lord Howe: midnight daily after the spring-forward",
			"CRON_TZ=Australia/Lord_Howe 0 0 * * *", "2026-10-03T00:00:00Z",
			[]string{"2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z", "2026-10-05T13:00:00Z"}},
		{"Lord Howe: the skipped 02:15 runs at the jump, once with 02:30",
			"CRON_TZ=Australia/Lord_Howe 15,30 2 * * *", "2026-10-03T00:00:00Z",
			[]string{"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z", "2026-10-04T15:30:00Z"}},
		{"Lord Howe: the repeated 01:45 runs once",
			"CRON_TZ=Australia/Lord_Howe 45 1 * * *", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"Lord Howe: a wildcard hour runs twice in the repeated half hour",
			"CRON_TZ=Australia/Lord_Howe 45 * * * *", "2026-04-04T14:00:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z", "2026-04-04T16:15:00Z"}},
		{"Lord Howe: a wildcard hour skips the missing 02:15",
			"CRON_TZ=Australia/Lord_Howe 15 * * * *", "2026-10-03T14:00:00Z",
			[]string{"2026-10-03T14:45:00Z", "2026-10-03T16:15:00Z"}},
		// Go's ZoneBounds reports an end before the instant in the last UTC
		// day of a leap year in zones served by their TZ rule (Go issue 81583).
		{"Warsaw across the end of 2028",
			"CRON_TZ=Europe/Warsaw 30 2 * * *", "2028-12-31T01:30:00Z",
			[]string{"2029-01-01T01:30:00Z", "2029-01-02T01:30:00Z"}},
		{"Warsaw across the end of 2040",
			"CRON_TZ=Europe/Warsaw 30 2 * * *", "2040-12-31T12:00:00Z",
			[]string{"2041-01-01T01:30:00Z", "2041-01-02T01:30:00Z"}},
		{"Warsaw, wildcard hour, across the end of 2040",
			"CRON_TZ=Europe/Warsaw 0 */12 * * *", "2040-12-31T10:00:00Z",
			[]string{"2040-12-31T11:00:00Z", "2040-12-31T23:00:00Z"}},
		// robfig/cron looks 5 years ahead; February 29 skips 2100.
		{"February 29 across 2100",
			"0 0 29 2 *", "2097-01-01T00:00:00Z",
			[]string{"2104-02-29T00:00:00Z", "2108-02-29T00:00:00Z"}},
		{"February 29 across 2100, in a zone",
			"CRON_TZ=Europe/Berlin 0 12 29 2 *", "2097-01-01T00:00:00Z",
			[]string{"2104-02-29T11:00:00Z", "2108-02-29T11:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slots(t, tt.spec, utc(tt.from), len(tt.want))
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("slots after %s:\n got  %v\n want %v", tt.from, got, tt.want)
			}
		})
	}
}

package scheduler

import (
	"strings"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// slots returns the first n slots after from.
func slots(t *testing.T, spec string, from time.Time, n int) []string {
	t.Helper()
	s, err := ParseSchedule(spec)
	if err != nil {
		t.Fatalf("ParseSchedule(%q): %v", spec, err)
	}
	var out []string
	for range n {
		from = s.Next(from)
		out = append(out, from.UTC().Format(time.RFC3339))
	}
	return out
}

func TestScheduleSlots(t *testing.T) {
	tests := []struct {
		name, spec, from string
		want             []string
	}{
		{"5 fields, minutes", "*/15 * * * *", "2026-11-22T10:07:31Z",
			[]string{"2026-11-22T10:15:00Z", "2026-11-22T10:30:00Z", "2026-11-22T10:45:00Z"}},
		{"6 fields, seconds", "*/20 * * * * *", "2026-11-22T10:07:31Z",
			[]string{"2026-11-22T10:07:40Z", "2026-11-22T10:08:00Z", "2026-11-22T10:08:20Z"}},
		{"the noon lottery", "0 0 12 * * *", "2026-11-22T12:00:00Z",
			[]string{"2026-11-23T12:00:00Z", "2026-11-24T12:00:00Z", "2026-11-25T12:00:00Z"}},
		{"descriptor", "@daily", "2026-11-22T10:00:00Z",
			[]string{"2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z", "2026-11-25T00:00:00Z"}},
		{"UTC without a prefix, whatever time.Local is", "0 9 * * *", "2026-11-22T10:00:00Z",
			[]string{"2026-11-23T09:00:00Z", "2026-11-24T09:00:00Z", "2026-11-25T09:00:00Z"}},
		{"CRON_TZ", "CRON_TZ=Asia/Tokyo 0 9 * * *", "2026-11-22T10:00:00Z",
			[]string{"2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z", "2026-11-25T00:00:00Z"}},
		{"@every aligned to the epoch", "@every 7s", "2026-11-22T10:00:00Z",
			// 2026-11-22T10:00:00Z is 1795341600, 3 past a multiple of 7
			[]string{"2026-11-22T10:00:04Z", "2026-11-22T10:00:11Z", "2026-11-22T10:00:18Z"}},
		{"@every from a slot", "@every 1m", "2026-11-22T10:00:00Z",
			[]string{"2026-11-22T10:01:00Z", "2026-11-22T10:02:00Z", "2026-11-22T10:03:00Z"}},
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

// TestEveryAgreesAcrossStartTimes: replicas that start at different moments
// compute the same @every slots, unlike robfig's @every, which counts from start.
func TestEveryAgreesAcrossStartTimes(t *testing.T) {
	s, _ := ParseSchedule("@every 10s")
	a := s.Next(utc("2026-11-22T10:00:03Z").Add(123 * time.Millisecond))
	b := s.Next(utc("2026-11-22T10:00:08Z"))
	if !a.Equal(b) || a.Unix()%10 != 0 {
		t.Fatalf("replicas disagree: %v vs %v", a, b)
	}
}

// TestDSTNewYork pins the daylight-saving rules on the 2026 changes in
// America/New_York: spring forward on March 8 (02:00 EST -> 03:00 EDT), fall
// back on November 1 (02:00 EDT -> 01:00 EST).
func TestDSTNewYork(t *testing.T) {
	tests := []struct {
		name, spec, from string
		want             []string
	}{
		{"02:30 daily runs at the change on the day it does not exist",
			"CRON_TZ=America/New_York 30 2 * * *", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z" /* 03:00 EDT */, "2026-03-09T06:30:00Z" /* 02:30 EDT */}},
		{"several skipped times run once",
			"CRON_TZ=America/New_York */20 2 * * *", "2026-03-08T06:50:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{"01:30 daily runs once on the day it happens twice",
			"CRON_TZ=America/New_York 30 1 * * *", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z" /* 01:30 EDT */, "2026-11-02T06:30:00Z" /* 01:30 EST */}},
		{"a wildcard hour follows real time through the repeated hour",
			"CRON_TZ=America/New_York 0 */30 * * * *", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z"}},
		{"a wildcard hour follows real time through the skipped hour",
			"CRON_TZ=America/New_York 0 */30 * * * *", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		{"noon is untouched", "CRON_TZ=America/New_York 0 0 12 * * *", "2026-03-07T18:00:00Z",
			[]string{"2026-03-08T16:00:00Z", "2026-03-09T16:00:00Z"}},
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

func TestScheduleErrors(t *testing.T) {
	tests := map[string]string{
		"":                            "empty schedule",
		"* * * *":                     "expected 5 or 6 fields, found 4",
		"* * * * * * *":               "expected 5 or 6 fields, found 7",
		"61 * * * *":                  "end of range (61) above maximum (59)",
		"@every 1500ms":               "whole number of seconds",
		"@every 0s":                   "whole number of seconds",
		"@every soon":                 "invalid duration",
		"CRON_TZ=Mars/Base 0 * * * *": "unknown time zone",
		"CRON_TZ=UTC @every 5s":       "a time zone does not apply",
		"0 0 30 2 *":                  "never fires",
		"@fortnightly":                "unrecognized descriptor",
		"CRON_TZ=Local 0 9 * * *":     "CRON_TZ=Local is each machine's own zone",
		"TZ=Local 0 9 * * *":          "TZ=Local is each machine's own zone",
		"CRON_TZ=Local @daily":        "CRON_TZ=Local is each machine's own zone",
	}
	for spec, want := range tests {
		_, err := ParseSchedule(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSchedule(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
}

package scheduler

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// fuzzZones are the zones FuzzSchedule puts in front of a spec (a spec can
// also carry its own prefix): "" for none, odd changes, "Local".
var fuzzZones = []string{
	"", "UTC", "America/New_York", "Europe/Berlin", "Europe/Warsaw",
	"Australia/Lord_Howe", "Pacific/Chatham", "Antarctica/Troll",
	"Antarctica/Casey", "Asia/Kathmandu", "America/St_Johns",
	"Africa/Casablanca", "America/Santiago", "Pacific/Apia",
	"Pacific/Kiritimati", "America/Sitka", "Asia/Manila", "Local",
}

// FuzzSchedule: ParseSchedule never panics or hangs, refuses Local, and a
// parsed schedule's Next is strictly after its input, or the zero time only
// within 10 years of the last slot (ParseSchedule refuses expressions that
// never fire, and any other fires at least every 8 years). In UTC, Next
// agrees with robfig/cron wherever robfig answers (within 5 years).
//
//	go test -run '^$' -fuzz FuzzSchedule -fuzztime 60s ./scheduler
func FuzzSchedule(f *testing.F) {
	seeds := []struct {
		spec string
		zone uint8
		sec  int64
	}{
		{"45 3 * * *", 6, 1585922400},      // Chatham, the 03:45 fall-back
		{"0 0 * * *", 5, 1586005200},       // Lord Howe, the day after
		{"15,30 2 * * *", 5, 1601683200},   // Lord Howe, spring forward
		{"45 * * * *", 5, 1775311200},      // Lord Howe, real time
		{"30 2 * * *", 4, 2240136000},      // Warsaw, 2040-12-31 (Go issue 81583)
		{"0 */12 * * *", 4, 2240128800},    //
		{"0 0 29 2 *", 0, 4039372800},      // 2098: the next is in 2104
		{"0 12 29 2 *", 3, 4039372800},     //
		{"*/20 2 * * *", 2, 1772952600},    // New York, several skipped times
		{"0 */30 * * * *", 2, 1793509200},  // New York, real time, fall-back
		{"30 1 * * *", 9, 1585922400},      // Kathmandu
		{"0 0 1 1 *", 16, -62135596800},    // Manila, from the zero time
		{"* * * * * *", 0, -62135596801},   // before the zero time
		{"* * * * *", 0, 253402300799},     // the last slot
		{"0 0 31 12 *", 14, 253370764800},  // Kiritimati, 9998
		{"@every 7s", 0, 1795341600},       //
		{"@every 1s", 0, math.MaxInt64},    //
		{"@every 3600s", 0, math.MinInt64}, //
		{"@daily", 7, 1711846800},          // Troll, +2h
		{"@hourly", 11, 1740272400},        // Casablanca
		{"@weekly", 12, 1743908400},        // Santiago
		{"0 0 30 2 *", 0, 0},               // never
		{"0 9 * * *", 17, 0},               // Local
		{"TZ=Local 0 9 * * *", 0, 0},       //
		{"CRON_TZ=Pacific/Chatham 45 2,3 * * *", 0, 1790380800},
		{"CRON_TZ= 0 * * * *", 0, 0},            //
		{"CRON_TZ=UTC", 0, 0},                   //
		{"*/0 * * * *", 0, 0},                   //
		{"0-59/61 * * * *", 0, 0},               //
		{"1-0 * * * *", 0, 0},                   //
		{"0 0 * * 7", 0, 0},                     //
		{"@every -1s", 0, 0},                    //
		{"0 0 1,15 * mon", 13, 1609459200},      // Apia, day fields or-ed
		{"59 59 23 31 12 *", 15, -3225223728},   // Sitka, 1867: the clock set back a day
		{"0 0 0 29 2 1", 0, math.MaxInt64 / 2},  //
		{"5 4 * * sun", 10, 1699065000},         // St Johns
		{"*/13 */7 */5 */3 */2 *", 1, 1e9},      //
		{"0 30 2 * * *", 3, 1711846800 - 86400}, // Berlin, 02:30 skipped
	}
	for _, s := range seeds {
		f.Add(s.spec, s.zone, s.sec, uint32(0))
	}
	f.Add("30 * * * *", uint8(5), int64(1775311200), uint32(999_999_999))
	f.Fuzz(func(t *testing.T, spec string, zone uint8, sec int64, nsec uint32) {
		full, z := spec, fuzzZones[int(zone)%len(fuzzZones)]
		if z != "" {
			full = "CRON_TZ=" + z + " " + spec
		}
		s, err := ParseSchedule(full)
		if z == "Local" && err == nil {
			t.Fatalf("ParseSchedule(%q) accepted the machine's zone", full)
		}
		if err != nil {
			return
		}
		from := time.Unix(sec, int64(nsec%1e9))
		cur := from
		for range 4 {
			n := s.Next(cur)
			if n.IsZero() {
				if cur.Before(lastSlot.AddDate(-10, 0, 0)) {
					t.Fatalf("%q: Next(%s) = never, yet it was accepted", full, cur.UTC().Format(time.RFC3339Nano))
				}
				break
			}
			if !n.After(cur) {
				t.Fatalf("%q: Next(%s) = %s, not after it", full, cur.UTC().Format(time.RFC3339Nano), n.UTC().Format(time.RFC3339Nano))
			}
			cur = n
		}
		if (z == "" || z == "UTC") && !strings.Contains(spec, "TZ=") {
			agreeWithRobfig(t, full, s, from)
		}
	})
}

// agreeWithRobfig checks a UTC schedule against robfig/cron, which is right
// in UTC (no changes to mishandle) where it answers: within 5 years.
func agreeWithRobfig(t *testing.T, spec string, s Schedule, from time.Time) {
	t.Helper()
	if _, ok := s.(*cronSchedule); !ok || from.Before(time.Time{}) || from.After(lastSlot.AddDate(-10, 0, 0)) {
		return
	}
	body := strings.TrimSpace(spec)
	if !strings.HasPrefix(body, "CRON_TZ=") {
		body = "CRON_TZ=UTC " + body
	}
	r, err := parser.Parse(body)
	if err != nil {
		t.Fatalf("%q: ParseSchedule accepted it, robfig/cron: %v", spec, err)
	}
	want := r.(*cron.SpecSchedule).Next(from)
	if got := s.Next(from); !want.IsZero() && !got.Equal(want) {
		t.Fatalf("%q: Next(%s) = %s, robfig/cron says %s", spec, from.UTC().Format(time.RFC3339Nano),
			got.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
	}
}

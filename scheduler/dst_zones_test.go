package scheduler

import (
	"archive/zip"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDSTEveryZone walks every zone of Go's tz database through 2020-2030
// and checks each slot against an oracle that knows only the zone's UTC
// offsets:
//
//   - CRON_TZ=<zone> 30 2 * * *, every day: each day's 02:30 runs once; if a
//     spring-forward change skips it, at the change; if a fall-back change
//     repeats it, at its first occurrence (Vixie cron).
//   - CRON_TZ=<zone> 30 * * * *, every hour: at each instant the zone's clock
//     shows :30, whether it shows it once, twice or never in an hour (real
//     time); across changes of a whole hour, exactly an hour apart.
//   - CRON_TZ=<zone> */15 0-23 * * *, for 13 hours either side of each change:
//     the rules above for every quarter hour, so every kind of change is
//     met whatever time of day it happens (Chatham's at 03:45, Lord Howe's
//     half hours, changes at midnight); skipped times run once, together.
//   - CRON_TZ=<zone> M H * * *, for each quarter hour H:M within 2 hours of
//     each change: the day before, the day of and the day after the change.
//     (robfig/cron steps an hour at a time, which a 30-minute change puts
//     out of step with the minutes, and loops at Chatham's 03:45.)
//
// The daily walk covers every day of every zone. The hourly walk covers
// every hour of the 11 years in the zones of wholeHours, chosen for their odd
// changes, and in every other zone 13 hours either side of each change and the
// first 4 hours of each month: between changes the offset is constant and
// nothing can differ. That keeps the test to a few seconds under -race.
func TestDSTEveryZone(t *testing.T) {
	names := tzdataZones(t)
	if len(names) < 400 {
		t.Fatalf("only %d zones in Go's tz database", len(names))
	}
	var (
		mu     sync.Mutex
		counts = map[string]walkCounts{}
	)
	t.Run("zone", func(t *testing.T) {
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				w := newZoneWalk(t, name)
				c := w.daily()
				c.quarter = w.quarterHours()
				c.timesOfDay = w.timesOfDay()
				c.hourly = w.hourly(slices.Contains(wholeHours, name))
				mu.Lock()
				counts[name] = c
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	if len(counts) != len(names) {
		t.Fatalf("walked %d zones of %d", len(counts), len(names))
	}
	// Each day's 02:30 ran once, in every zone.
	for name, c := range counts {
		if c.runs != 4018 {
			t.Errorf("%s: 02:30 ran %d times in 2020-2030, want 4018 (one a day)", name, c.runs)
		}
	}
	// The changes the walk met, pinned in zones where they are known.
	known := map[string]walkCounts{
		"America/New_York":    {skipped: 11},               // 02:00 -> 03:00 in March; falls back 02:00 -> 01:00
		"Europe/Berlin":       {skipped: 11, repeated: 11}, // 02:00 -> 03:00; 03:00 -> 02:00
		"Australia/Lord_Howe": {},                          // 02:00 -> 02:30; 02:00 -> 01:30
		"Pacific/Chatham":     {},                          // 02:45 -> 03:45; 03:45 -> 02:45
		"Asia/Tokyo":          {},
		"UTC":                 {},
	}
	for name, want := range known {
		got := counts[name]
		if got.skipped != want.skipped || got.repeated != want.repeated {
			t.Errorf("%s: 02:30 skipped %d times and repeated %d, want %d and %d",
				name, got.skipped, got.repeated, want.skipped, want.repeated)
		}
	}
	var all walkCounts
	for _, c := range counts {
		all.skipped += c.skipped
		all.repeated += c.repeated
		all.quarter += c.quarter
		all.timesOfDay += c.timesOfDay
		all.hourly += c.hourly
	}
	t.Logf("%d zones: 02:30 skipped %d times and repeated %d; %d quarter-hour, %d time-of-day and %d hourly slots checked",
		len(names), all.skipped, all.repeated, all.quarter, all.timesOfDay, all.hourly)
	for _, name := range wholeHours {
		if c, ok := counts[name]; !ok || c.hourly < 96000 {
			t.Errorf("%s: %d hourly slots checked, want every hour of 2020-2030", name, c.hourly)
		}
	}
	if all.skipped < 300 || all.repeated < 300 {
		t.Errorf("02:30 skipped %d times and repeated %d in all zones: the walk missed the changes", all.skipped, all.repeated)
	}
}

// wholeHours are the zones walked every hour of 2020-2030.
var wholeHours = []string{
	"UTC",
	"America/New_York",    // 02:00 -> 03:00, 02:00 -> 01:00
	"Europe/Berlin",       // 02:00 -> 03:00, 03:00 -> 02:00
	"Australia/Lord_Howe", // 30-minute changes
	"Pacific/Chatham",     // 02:45 -> 03:45, 03:45 -> 02:45
	"Asia/Kathmandu",      // +05:45, no changes
	"America/St_Johns",    // -03:30 with DST
	"Antarctica/Troll",    // 2-hour changes
	"Africa/Casablanca",   // DST suspended each Ramadan
	"America/Santiago",    // changes at midnight
	"Asia/Tehran",         // DST until 2022
	"Pacific/Apia",        // DST until 2021
}

// tzdataZones lists the zones in GOROOT/lib/time/zoneinfo.zip, the data
// time/tzdata embeds.
func tzdataZones(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	z, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(out)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, "/") {
			names = append(names, f.Name)
		}
	}
	slices.Sort(names)
	return names
}

type walkCounts struct {
	runs, skipped, repeated     int // of the daily 02:30
	quarter, timesOfDay, hourly int // slots checked
}

// zoneWalk checks one zone's schedules against its zoneClock.
type zoneWalk struct {
	t     *testing.T
	name  string
	loc   *time.Location
	clock zoneClock
}

func newZoneWalk(t *testing.T, name string) *zoneWalk {
	loc, err := time.LoadLocation(name) // as CRON_TZ= does
	if err != nil {
		t.Fatal(err)
	}
	from, to := reading0.Add(-4*24*time.Hour).Unix(), reading1.Add(4*24*time.Hour).Unix()
	return &zoneWalk{t: t, name: name, loc: loc, clock: scanZone(loc, from, to)}
}

// around is how far either side of each change the quarter-hour and hourly
// walks go, in seconds: past the skipped or repeated times of any change.
const around = 13 * 3600

// The readings walked: 2020 to 2030, on each zone's clock.
var (
	reading0 = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	reading1 = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
)

func (w *zoneWalk) schedule(expr string) Schedule {
	s, err := ParseSchedule("CRON_TZ=" + w.name + " " + expr)
	if err != nil {
		w.t.Fatalf("ParseSchedule: %v", err)
	}
	return s
}

// walk calls Next from start and from each slot, and compares the slots
// with want (Unix seconds). It stops at the first difference.
func (w *zoneWalk) walk(expr string, s Schedule, start int64, want []int64) bool {
	w.t.Helper()
	cur := time.Unix(start, 0)
	for i, e := range want {
		got := s.Next(cur)
		if !got.After(cur) || got.Unix() != e || got.Nanosecond() != 0 {
			w.t.Errorf("%s: slot %d after %s: got %s, want %s", expr, i, w.show(cur.Unix()), w.show(got.Unix()), w.show(e))
			return false
		}
		cur = got
	}
	return true
}

func (w *zoneWalk) show(sec int64) string {
	return time.Unix(sec, 0).In(w.loc).Format("2006-01-02 15:04:05 -07:00:00") + fmt.Sprintf(" (%d)", sec)
}

// daily walks 30 2 * * * over every day.
func (w *zoneWalk) daily() walkCounts {
	var c walkCounts
	start, _ := w.clock.vixie(reading0.Add(-24*time.Hour + 150*time.Minute).Unix())
	var want []int64
	for d := reading0; d.Before(reading1); d = d.AddDate(0, 0, 1) {
		at, kind := w.clock.vixie(d.Add(150 * time.Minute).Unix())
		switch kind {
		case "skipped":
			c.skipped++
		case "repeated":
			c.repeated++
		}
		if len(want) > 0 && at <= want[len(want)-1] || len(want) == 0 && at <= start {
			w.t.Fatalf("oracle: 02:30 on %s at %s, not after the day before's", d.Format(time.DateOnly), w.show(at))
		}
		want = append(want, at)
	}
	if w.walk("30 2 * * *", w.schedule("30 2 * * *"), start, want) {
		c.runs = len(want)
	}
	return c
}

// quarterHours walks */15 0-23 * * * for 13 hours either side of each change.
func (w *zoneWalk) quarterHours() int {
	s, n := w.schedule("*/15 0-23 * * *"), 0
	for _, ch := range w.clock.changes {
		start, end := ch.at-around, ch.at+around
		var want []int64
		first := w.clock.reading(start) / 900 * 900
		for r := first; r <= w.clock.reading(end); r += 900 {
			at, _ := w.clock.vixie(r)
			switch {
			case at <= start: // reached before start (a repeated time)
			case len(want) > 0 && at == want[len(want)-1]: // skipped times run once, at the change
			case len(want) > 0 && at < want[len(want)-1]:
				w.t.Fatalf("oracle: %s runs at %s, before the time before it", time.Unix(r, 0).UTC().Format(time.DateTime), w.show(at))
			default:
				want = append(want, at)
			}
		}
		if !w.walk("*/15 0-23 * * *", s, start, want) {
			return n
		}
		n += len(want)
	}
	return n
}

// timesOfDay walks M H * * * for each quarter hour H:M within 2 hours of
// each change (as the clock read just before it), for 3 slots from a day
// before it.
func (w *zoneWalk) timesOfDay() int {
	scheds, n := map[int64]Schedule{}, 0
	for _, ch := range w.clock.changes {
		start, near := ch.at-26*3600, (ch.at+int64(ch.before))/900*900
		for q := int64(-8); q <= 8; q++ {
			tod := ((near+q*900)%86400 + 86400) % 86400
			expr := fmt.Sprintf("%d %d * * *", tod%3600/60, tod/3600)
			s := scheds[tod]
			if s == nil {
				s = w.schedule(expr)
				scheds[tod] = s
			}
			var want []int64
			for day := (near+q*900)/86400*86400 - 2*86400; len(want) < 3; day += 86400 {
				switch at, _ := w.clock.vixie(day + tod); {
				case at <= start:
				case len(want) > 0 && at <= want[len(want)-1]:
					w.t.Fatalf("oracle: %s on %s runs at %s, not after the day before's", expr, time.Unix(day, 0).UTC().Format(time.DateOnly), w.show(at))
				default:
					want = append(want, at)
				}
			}
			if !w.walk(expr, s, start, want) {
				return n
			}
			n += len(want)
		}
	}
	return n
}

// hourly walks 30 * * * *: over every hour if whole, else for a day either
// side of each change and for a few hours from each month's start.
func (w *zoneWalk) hourly(whole bool) int {
	s := w.schedule("30 * * * *")
	wholeHours := true
	for _, ch := range w.clock.changes {
		wholeHours = wholeHours && (ch.after-ch.before)%3600 == 0
	}
	check := func(start, end int64) int {
		want := w.clock.showing(start, end, 1800)
		for i := 1; i < len(want) && wholeHours; i++ {
			if want[i]-want[i-1] != 3600 {
				w.t.Fatalf("oracle: :30 at %s then %s, not an hour later", w.show(want[i-1]), w.show(want[i]))
			}
		}
		w.walk("30 * * * *", s, start, want)
		return len(want)
	}
	from, to := reading0.Unix()-14*3600, reading1.Unix()+12*3600
	if whole {
		return check(from, to)
	}
	n := 0
	for _, ch := range w.clock.changes {
		n += check(ch.at-around, ch.at+around)
	}
	for m := reading0; m.Before(reading1); m = m.AddDate(0, 1, 0) {
		n += check(m.Unix(), m.Unix()+4*3600)
	}
	return n
}

// zoneClock is the oracle: a zone's UTC offsets over a span, found by
// sampling every 3 hours and bisecting to the second, without ZoneBounds
// (the code under test uses it). No zone changes twice within 3 hours in
// the years walked.
type zoneClock struct {
	first   int // the offset before the first change
	changes []zoneChange
	offs    []int // the distinct offsets
}

type zoneChange struct {
	at            int64 // the first second of the new offset
	before, after int   // UTC offsets, in seconds
}

func scanZone(loc *time.Location, from, to int64) zoneClock {
	offset := func(sec int64) int {
		_, o := time.Unix(sec, 0).In(loc).Zone()
		return o
	}
	c := zoneClock{first: offset(from)}
	const step = 3 * 3600
	for s, o := from, c.first; s < to; s += step {
		if o2 := offset(s + step); o2 != o {
			lo, hi := s, s+step
			for hi-lo > 1 {
				if mid := lo + (hi-lo)/2; offset(mid) == o {
					lo = mid
				} else {
					hi = mid
				}
			}
			c.changes = append(c.changes, zoneChange{hi, o, o2})
			o = o2
		}
	}
	c.offs = []int{c.first}
	for _, ch := range c.changes {
		if !slices.Contains(c.offs, ch.after) {
			c.offs = append(c.offs, ch.after)
		}
	}
	return c
}

func (c zoneClock) offset(sec int64) int {
	o := c.first
	for _, ch := range c.changes {
		if sec >= ch.at {
			o = ch.after
		}
	}
	return o
}

// reading returns what the clock shows at sec, in Unix seconds of UTC.
func (c zoneClock) reading(sec int64) int64 { return sec + int64(c.offset(sec)) }

// vixie returns when the reading r (Unix seconds of UTC) runs under Vixie
// cron's rules: the first instant the clock shows r, or the spring-forward
// change that skips it, whichever is earlier; and which of once, repeated
// or skipped it is.
func (c zoneClock) vixie(r int64) (int64, string) {
	at, kind := int64(0), ""
	for _, o := range c.offs {
		if t := r - int64(o); c.offset(t) == o {
			switch {
			case kind == "":
				at, kind = t, "once"
			case t < at:
				at, kind = t, "repeated"
			default:
				kind = "repeated"
			}
		}
	}
	for _, ch := range c.changes {
		if ch.at+int64(ch.before) <= r && r < ch.at+int64(ch.after) && (kind == "" || ch.at < at) {
			at, kind = ch.at, "skipped"
		}
	}
	if kind == "" {
		panic(fmt.Sprintf("oracle: the clock never reaches %d", r))
	}
	return at, kind
}

// showing returns the instants in (start, end] at which the clock shows
// a reading whose seconds within the hour are sec.
func (c zoneClock) showing(start, end int64, sec int64) []int64 {
	var out []int64
	bounds := []int64{start + 1}
	for _, ch := range c.changes {
		if ch.at > start+1 && ch.at <= end {
			bounds = append(bounds, ch.at)
		}
	}
	bounds = append(bounds, end+1)
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		o := int64(c.offset(lo))
		first := lo + ((sec-(lo+o))%3600+3600)%3600
		for at := first; at < hi; at += 3600 {
			out = append(out, at)
		}
	}
	return out
}

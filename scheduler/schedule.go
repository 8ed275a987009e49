package scheduler

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule gives a job's slot times.
type Schedule interface {
	// Next returns the first slot strictly after t, in t's location, or
	// the zero time if there is none. Slots lie after the zero time and no
	// later than the last second of the year 9999 (lastSlot).
	Next(t time.Time) time.Time
}

// lastSlot is the latest slot a Schedule gives.
var lastSlot = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)

// parser reads 5 fields (minute first) or 6 (seconds first), descriptors such
// as @daily, and a CRON_TZ= or TZ= prefix.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses a job's schedule: a cron expression of 5 fields, or 6
// with seconds first; a descriptor (@yearly, @monthly, @weekly, @daily,
// @hourly); or @every D, where D is a whole number of seconds of at least 1s
// and the slots are the multiples of D since the Unix epoch, so that every
// replica computes the same slots whenever it started. A CRON_TZ=Zone or
// TZ=Zone prefix sets the time zone of a cron expression; without one it is
// UTC, whatever the machine's zone, so that every replica computes the same
// slots. For the same reason CRON_TZ=Local and TZ=Local are refused: each
// machine would read its own zone.
//
// Across daylight-saving and other changes of a zone's UTC offset, whatever
// their size (Lord Howe's is 30 minutes, Chatham's moves 03:45 to 02:45),
// expressions whose hour field is fixed (not starting with '*') follow Vixie
// cron: each time runs once; a time that a spring-forward change skips runs
// at the instant of the change (once, however many of its times it skips),
// and a time that a fall-back change repeats runs at its first occurrence.
// Expressions whose hour field starts with '*' follow real time: they run at
// each instant the zone's clock shows one of their times, so across a change
// of a whole hour they neither gain nor lose runs, while a 30-minute change
// can skip or repeat one.
//
// An expression that never fires (0 0 30 2 *) is refused. Next returns the
// zero time only past a schedule's last slot, in the year 9999.
func ParseSchedule(spec string) (Schedule, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("empty schedule")
	}
	body, prefix := s, ""
	if strings.HasPrefix(body, "CRON_TZ=") || strings.HasPrefix(body, "TZ=") {
		p, rest, ok := strings.Cut(body, " ")
		if !ok {
			return nil, fmt.Errorf("%q: a time zone prefix needs an expression after it", spec)
		}
		body, prefix = strings.TrimSpace(rest), p
	}
	if d, ok := strings.CutPrefix(body, "@every"); ok {
		if body != s {
			return nil, fmt.Errorf("%q: @every slots are aligned to the Unix epoch; a time zone does not apply", spec)
		}
		return parseEvery(strings.TrimSpace(d))
	}
	fields := strings.Fields(body)
	if !strings.HasPrefix(body, "@") && len(fields) != 5 && len(fields) != 6 {
		return nil, fmt.Errorf("expected 5 or 6 fields, found %d", len(fields))
	}
	if prefix == "" {
		s = "CRON_TZ=UTC " + s
	}
	parsed, err := parser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	spec2, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%q: unexpected schedule type %T", spec, parsed)
	}
	if spec2.Location == time.Local { // time.LoadLocation("Local")
		return nil, fmt.Errorf("%q: %s is each machine's own zone, so replicas could disagree on the slots; name the zone, as in CRON_TZ=Europe/Paris", spec, prefix)
	}
	sched := newCronSchedule(spec2, !wildcardHour(body, fields))
	if sched.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%q never fires", spec)
	}
	return sched, nil
}

// wildcardHour reports whether the hour field starts with '*' (or the
// descriptor is @hourly): such expressions follow real time across DST.
func wildcardHour(body string, fields []string) bool {
	switch {
	case body == "@hourly":
		return true
	case strings.HasPrefix(body, "@"):
		return false
	case len(fields) == 5:
		return strings.HasPrefix(fields[1], "*")
	default:
		return strings.HasPrefix(fields[2], "*")
	}
}

func parseEvery(d string) (Schedule, error) {
	every, err := time.ParseDuration(d)
	if err != nil {
		return nil, fmt.Errorf("@every %s: %w", d, err)
	}
	if every < time.Second || every%time.Second != 0 {
		return nil, fmt.Errorf("@every %s: the period must be a whole number of seconds, at least 1s", d)
	}
	return everySchedule{every}, nil
}

// everySchedule fires at the multiples of period since the Unix epoch.
type everySchedule struct{ period time.Duration }

func (e everySchedule) Next(t time.Time) time.Time {
	from := t
	if from.Before(time.Time{}) {
		from = time.Time{}
	}
	if !from.Before(lastSlot) {
		return time.Time{}
	}
	p, u := int64(e.period/time.Second), from.Unix()
	next := (u/p + 1) * p
	if u < 0 && u%p != 0 { // floor division for times before 1970
		next -= p
	}
	if n := time.Unix(next, 0); !n.After(lastSlot) {
		return n.In(t.Location())
	}
	return time.Time{}
}

// nextReading returns the first reading (a wall-clock time, held in UTC; see
// dst.go) strictly after w that the expression names, and false if there is
// none before the year 10001; the reading 0001-01-01 00:00 is the zero time,
// which therefore cannot mean none. robfig/cron's own Next steps a second,
// minute or hour at a time, and gives up after 5 years; this one jumps from
// field to field. An expression that names any day names one at least every
// 8 years (February 29 skips 2100), so 10 years without one means never.
func (c *cronSchedule) nextReading(w time.Time) (time.Time, bool) {
	m := &c.match
	w = w.Add(time.Second - time.Duration(w.Nanosecond()))
	year, mon, day := w.Date()
	hour, minute, second := w.Clock()
	month := int(mon)
	limit := min(year+10, 10000)
	for {
		if day > daysIn(year, month) {
			month, day = month+1, 1
		}
		if month > 12 {
			year, month = year+1, 1
		}
		if year > limit {
			return time.Time{}, false
		}
		if v := nextBit(m.Month, month, 12); v != month {
			if v < 0 {
				year, month, day, hour, minute, second = year+1, 1, 1, 0, 0, 0
			} else {
				month, day, hour, minute, second = v, 1, 0, 0, 0
			}
			continue
		}
		if v := c.nextDay(year, month, day); v != day {
			if v < 0 {
				month, day, hour, minute, second = month+1, 1, 0, 0, 0
			} else {
				day, hour, minute, second = v, 0, 0, 0
			}
			continue
		}
		if v := nextBit(m.Hour, hour, 23); v != hour {
			if v < 0 {
				day, hour, minute, second = day+1, 0, 0, 0
			} else {
				hour, minute, second = v, 0, 0
			}
			continue
		}
		if v := nextBit(m.Minute, minute, 59); v != minute {
			if v < 0 {
				hour, minute, second = hour+1, 0, 0
			} else {
				minute, second = v, 0
			}
			if hour > 23 {
				day, hour = day+1, 0
			}
			continue
		}
		if v := nextBit(m.Second, second, 59); v != second {
			if v < 0 {
				minute, second = minute+1, 0
				if minute > 59 {
					hour, minute = hour+1, 0
				}
				if hour > 23 {
					day, hour = day+1, 0
				}
			} else {
				second = v
			}
			continue
		}
		return time.Date(year, time.Month(month), day, hour, minute, second, 0, time.UTC), true
	}
}

// nextDay returns the first day from day on in the month that the
// expression's day fields name, or -1. As in robfig/cron (and Vixie cron),
// a day matches both fields if either starts with '*', else either field.
func (c *cronSchedule) nextDay(year, month, day int) int {
	const star, week = 1 << 63, 1<<7 - 1
	m := &c.match
	both := m.Dom&star != 0 || m.Dow&star != 0
	if both && m.Dow&week == week { // every day of the week: no need to know which
		return nextBit(m.Dom, day, daysIn(year, month))
	}
	wd := int(time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC).Weekday())
	for n := daysIn(year, month); day <= n; day, wd = day+1, (wd+1)%7 {
		dom, dow := m.Dom&(1<<day) != 0, m.Dow&(1<<wd) != 0
		if both && dom && dow || !both && (dom || dow) {
			return day
		}
	}
	return -1
}

// nextBit returns the first value from v on, up to max, in the bit set b,
// or -1.
func nextBit(b uint64, v, max int) int {
	if v > max {
		return -1
	}
	b = b >> v << v & (1<<(max+1) - 1)
	if b == 0 {
		return -1
	}
	return bits.TrailingZeros64(b)
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

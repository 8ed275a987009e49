package worker

import (
	"fmt"
	"strconv"
	"strings"
)

// describeSchedule says a schedule in words, for the dashboard: "every day
// at 12:00:00 UTC", "every 15 minutes, during hours 9-17, Monday to Friday
// (Europe/Paris)". It covers what the parser takes; an expression it cannot
// put in words is returned as it is.
func describeSchedule(expr string) string {
	tz := "UTC"
	spec := strings.TrimSpace(expr)
	if rest, ok := strings.CutPrefix(spec, "CRON_TZ="); ok {
		name, after, _ := strings.Cut(rest, " ")
		tz, spec = name, strings.TrimSpace(after)
	} else if rest, ok := strings.CutPrefix(spec, "TZ="); ok {
		name, after, _ := strings.Cut(rest, " ")
		tz, spec = name, strings.TrimSpace(after)
	}
	switch spec {
	case "@yearly", "@annually":
		return "every year on January 1 at 00:00 " + tz
	case "@monthly":
		return "on day 1 of every month at 00:00 " + tz
	case "@weekly":
		return "every Sunday at 00:00 " + tz
	case "@daily", "@midnight":
		return "every day at 00:00 " + tz
	case "@hourly":
		return "every hour, on the hour"
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		return "every " + strings.TrimSpace(d)
	}
	f := strings.Fields(spec)
	if len(f) == 5 {
		f = append([]string{"0"}, f...)
	}
	if len(f) != 6 {
		return expr
	}
	sec, min, hour, dom, mon, dow := f[0], f[1], f[2], f[3], f[4], f[5]
	var parts []string
	clock := false
	if s, m, h, ok := numbers(sec, min, hour); ok {
		clock = true
		if s == 0 {
			parts = append(parts, fmt.Sprintf("at %02d:%02d", h, m))
		} else {
			parts = append(parts, fmt.Sprintf("at %02d:%02d:%02d", h, m, s))
		}
	} else {
		parts = append(parts, timeParts(sec, min, hour)...)
	}
	var days []string
	// With both day fields restricted, cron runs on either (robfig's and
	// Vixie cron's rule): "0 0 12 13 * FRI" is every Friday and every 13th.
	switch domSet, dowSet := dom != "*" && dom != "?", dow != "*" && dow != "?"; {
	case domSet && dowSet:
		days = append(days, "on day "+dom+" of the month or on "+weekdays(dow))
	case domSet:
		days = append(days, "on day "+dom+" of the month")
	case dowSet:
		days = append(days, "on "+weekdays(dow))
	}
	if mon != "*" {
		days = append(days, "in "+months(mon))
	}
	if len(days) == 0 && clock {
		parts = append([]string{"every day"}, parts...)
	}
	out := strings.Join(append(parts, days...), ", ")
	out = strings.Replace(out, "every day, at", "every day at", 1)
	if clock || len(days) > 0 || hour != "*" {
		out += " " + tz
	}
	return out
}

// numbers reads three plain numbers.
func numbers(a, b, c string) (int, int, int, bool) {
	x, e1 := strconv.Atoi(a)
	y, e2 := strconv.Atoi(b)
	z, e3 := strconv.Atoi(c)
	return x, y, z, e1 == nil && e2 == nil && e3 == nil
}

// timeParts says the seconds, minutes and hours fields of a schedule that
// is not one time of day.
func timeParts(sec, min, hour string) []string {
	var out []string
	every := func(f, unit string) (string, bool) {
		if f == "*" {
			return "every " + unit, true
		}
		if n, ok := strings.CutPrefix(f, "*/"); ok {
			return "every " + n + " " + unit + "s", true
		}
		return "", false
	}
	switch s, ok := every(sec, "second"); {
	case ok:
		out = append(out, s)
	case sec != "0":
		out = append(out, "at second "+sec)
	}
	switch m, ok := every(min, "minute"); {
	case ok && min == "*" && len(out) > 0: // every second (of every minute)
	case ok:
		out = append(out, m)
	case hour == "*":
		out = append(out, "at minute "+min+" of every hour")
	default:
		out = append(out, "at minute "+min)
	}
	switch h, ok := every(hour, "hour"); {
	case ok && hour == "*":
	case ok:
		out = append(out, h)
	case strings.ContainsAny(hour, ",-"):
		out = append(out, "during hours "+hour)
	default:
		out = append(out, "during hour "+hour)
	}
	return out
}

var dayNames = map[string]string{"0": "Sunday", "1": "Monday", "2": "Tuesday", "3": "Wednesday", "4": "Thursday", "5": "Friday", "6": "Saturday", "7": "Sunday",
	"SUN": "Sunday", "MON": "Monday", "TUE": "Tuesday", "WED": "Wednesday", "THU": "Thursday", "FRI": "Friday", "SAT": "Saturday"}

var monthNames = map[string]string{"1": "January", "2": "February", "3": "March", "4": "April", "5": "May", "6": "June", "7": "July",
	"8": "August", "9": "September", "10": "October", "11": "November", "12": "December",
	"JAN": "January", "FEB": "February", "MAR": "March", "APR": "April", "MAY": "May", "JUN": "June", "JUL": "July",
	"AUG": "August", "SEP": "September", "OCT": "October", "NOV": "November", "DEC": "December"}

func weekdays(f string) string { return names(f, dayNames) }
func months(f string) string   { return names(f, monthNames) }

// names spells a list of values and ranges ("MON-FRI,SUN") with names.
func names(f string, m map[string]string) string {
	name := func(v string) string {
		if n, ok := m[strings.ToUpper(v)]; ok {
			return n
		}
		return v
	}
	var out []string
	for _, item := range strings.Split(f, ",") {
		if lo, hi, ok := strings.Cut(item, "-"); ok && !strings.Contains(hi, "/") {
			out = append(out, name(lo)+" to "+name(hi))
		} else {
			out = append(out, name(item))
		}
	}
	return strings.Join(out, ", ")
}

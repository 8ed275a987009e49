package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule gives a job's slot times.
type Schedule interface {
	// Next returns the first slot strictly after t.
	Next(t time.Time) time.Time
}

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
// slots.
//
// Across daylight-saving changes, expressions whose hour field is fixed (not
// starting with '*') follow Vixie cron: a time that a spring-forward change
// skips runs once, at the instant of the change, and a time that a fall-back
// change repeats runs once, at its first occurrence. Expressions whose hour
// field starts with '*' follow real time and neither gain nor lose runs.
func ParseSchedule(spec string) (Schedule, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("empty schedule")
	}
	body, zoned := s, false
	if strings.HasPrefix(body, "CRON_TZ=") || strings.HasPrefix(body, "TZ=") {
		_, rest, ok := strings.Cut(body, " ")
		if !ok {
			return nil, fmt.Errorf("%q: a time zone prefix needs an expression after it", spec)
		}
		body, zoned = strings.TrimSpace(rest), true
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
	if !zoned {
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
	var sched Schedule = spec2
	if !wildcardHour(body, fields) {
		sched = wallClock{spec2}
	}
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
	p := int64(e.period / time.Second)
	next := (t.Unix()/p + 1) * p
	if t.Unix() < 0 && t.Unix()%p != 0 { // floor division for times before 1970
		next -= p
	}
	return time.Unix(next, 0).In(t.Location())
}

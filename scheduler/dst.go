package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

// A reading is what a zone's clock shows at an instant, held as a time.Time
// in UTC whose fields are the clock's: at 2026-03-08T07:00:00Z New York's
// clock reads 2026-03-08T03:00:00 "UTC". A cron expression names readings;
// the zone decides at which instants its clock shows them, once, twice (in
// the hour a fall-back change repeats) or never (in the hour a spring-forward
// change skips). This file reads zones from their UTC offsets alone (Zone);
// Go's ZoneBounds serves only as a hint, because it can be wrong (see spanEnd).

// lookBack bounds how long before an instant a zone's clock can have shown a
// later reading than it shows at the instant: more than the largest UTC
// offset and the largest fall-back change in the tz database (about a day
// each).
const lookBack = 72 * time.Hour

// cronSchedule is a cron expression read on a zone's clock.
type cronSchedule struct {
	match cron.SpecSchedule // the expression's fields, in UTC: matched against readings
	loc   *time.Location
	// wall is set when the hour field is fixed: each reading the expression
	// names runs once, at the first instant the clock shows it or a later
	// one (Vixie cron's rules). Otherwise the expression runs at each instant
	// the clock shows one of its readings.
	wall bool
}

func newCronSchedule(spec *cron.SpecSchedule, wall bool) *cronSchedule {
	c := &cronSchedule{match: *spec, loc: spec.Location, wall: wall}
	c.match.Location = time.UTC
	return c
}

// Next returns the first slot strictly after t (see Schedule), following
// the zone's changes as ParseSchedule describes.
func (c *cronSchedule) Next(t time.Time) time.Time {
	from := t
	if from.Before(time.Time{}) {
		from = time.Time{}
	}
	if !from.Before(lastSlot) {
		return time.Time{}
	}
	var n time.Time
	if c.wall {
		n = c.nextWall(from.In(c.loc))
	} else {
		n = c.nextReal(from.In(c.loc))
	}
	if n.IsZero() || !n.After(t) || n.After(lastSlot) {
		return time.Time{}
	}
	return n.In(t.Location())
}

// nextWall returns the instant of the first reading of the expression that
// the clock has not reached by t.
func (c *cronSchedule) nextWall(t time.Time) time.Time {
	w, ok := c.nextReading(highWater(t))
	if !ok {
		return time.Time{}
	}
	return firstReaching(c.loc, w)
}

// nextReal returns the first instant after t at which the clock shows a
// reading of the expression, walking the stretches of constant UTC offset.
func (c *cronSchedule) nextReal(t time.Time) time.Time {
	cur, after := t, reading(t)
	for cur.Before(lastSlot) {
		w, ok := c.nextReading(after)
		if !ok {
			return time.Time{}
		}
		_, off := cur.Zone()
		at := w.Add(-time.Duration(off) * time.Second)
		end := spanEnd(cur)
		if end.IsZero() || at.Before(end) {
			return at
		}
		// The clock never shows w in this stretch: look again from the
		// next one, whose first reading may be earlier than w.
		cur = end.In(c.loc)
		after = reading(cur).Add(-time.Nanosecond)
	}
	return time.Time{}
}

// reading returns what t's zone's clock shows at t.
func reading(t time.Time) time.Time {
	_, off := t.Zone()
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// highWater returns the latest reading the clock has shown up to t: its
// reading at t, or a later one shown before a fall-back change set it back.
func highWater(t time.Time) time.Time {
	high := reading(t)
	for cur := t.Add(-lookBack); ; {
		end := spanEnd(cur)
		if end.IsZero() || end.After(t) {
			return high
		}
		_, off := cur.Zone()
		if last := end.UTC().Add(time.Duration(off)*time.Second - time.Nanosecond); last.After(high) {
			high = last
		}
		cur = end.In(t.Location())
	}
}

// firstReaching returns the first instant at which loc's clock shows the
// reading w or a later one: the instant it shows w, the first of two if a
// fall-back change repeats w, or the spring-forward change that skips w.
func firstReaching(loc *time.Location, w time.Time) time.Time {
	cur := w.Add(-lookBack).In(loc) // the clock reads less than w then
	for {
		_, off := cur.Zone()
		at := w.Add(-time.Duration(off) * time.Second)
		end := spanEnd(cur)
		if end.IsZero() || at.Before(end) {
			if at.Before(cur) { // this stretch starts past w
				return cur
			}
			return at
		}
		cur = end.In(loc)
	}
}

// spanEnd returns the end of the stretch of constant UTC offset around t, or
// the zero time if the offset never changes after t. The end can be a
// boundary where the offset stays the same (ZoneBounds reports one at the
// start of each year of a zone's TZ rule); callers step over it.
func spanEnd(t time.Time) time.Time {
	_, end := t.ZoneBounds()
	if end.IsZero() || end.After(t) {
		return end
	}
	// Go issue 81583: in the last UTC day of a leap year ruled by a zone's
	// TZ rule, ZoneBounds returns an end at or before t. Find the next change
	// in the two days after t by bisection, to the second, as tz data is.
	_, off := t.Zone()
	offsetAt := func(sec int64) int {
		_, o := time.Unix(sec, 0).In(t.Location()).Zone()
		return o
	}
	lo, hi := t.Unix(), t.Unix()+2*86400
	if offsetAt(hi) == off {
		return time.Unix(hi, 0).In(t.Location())
	}
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; offsetAt(mid) == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0).In(t.Location())
}

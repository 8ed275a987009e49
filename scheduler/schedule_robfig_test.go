package scheduler

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestNextAgreesWithRobfigInUTC: the field matching that replaced robfig/cron's
// Next gives robfig's slots in UTC, where robfig is right, from random times
// in years 1 to 9989 and from the ends of months and years.
func TestNextAgreesWithRobfigInUTC(t *testing.T) {
	specs := []string{
		"* * * * *", "*/15 * * * *", "30 2 * * *", "0 0 * * *", "59 23 31 12 *",
		"0 0 29 2 *", "0 0 31 * *", "0 12 1,15 * mon", "0 0 * * 0", "0 0 13 * fri",
		"5 4 * * sun", "0 9 * jan,jul mon-fri", "*/7 */5 */3 */2 *",
		"*/13 */7 */5 */3 */2 *", "0 0 0 29 2 1", "59 59 23 * * *", "1-10/3 2-20/6 * * *",
		"0 */1 * 1-31/1 * *", "0 0 1 1 *", "@yearly", "@monthly", "@weekly", "@daily",
		"@hourly",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	first, last := time.Time{}.Unix(), lastSlot.AddDate(-10, 0, 0).Unix()
	n := 0
	for _, spec := range specs {
		s, err := ParseSchedule(spec)
		if err != nil {
			t.Fatalf("ParseSchedule(%q): %v", spec, err)
		}
		var froms []time.Time
		for y := 1999; y <= 2101; y++ {
			froms = append(froms, time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond),
				time.Date(y, 3, 1, 0, 0, 0, 0, time.UTC).Add(-time.Second))
		}
		for range 300 {
			froms = append(froms, time.Unix(first+rng.Int64N(last-first), rng.Int64N(1e9)))
		}
		for _, from := range froms {
			agreeWithRobfig(t, spec, s, from)
			n++
		}
	}
	if n < 10000 {
		t.Fatalf("compared %d slots", n)
	}
}

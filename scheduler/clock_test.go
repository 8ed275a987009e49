package scheduler_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/slotcron/slotcron/scheduler"
)

// A slot's claims leave when the system clock's timer fires: never before
// its time, whatever the duration (shorter or longer than the timer's lead).
func TestSystemClockTimerNeverEarly(t *testing.T) {
	clock := scheduler.SystemClock()
	for i := range 40 {
		d := time.Duration(rand.N(5000)) * time.Microsecond
		if i%10 == 0 {
			d = 20*time.Millisecond + d
		}
		start := time.Now()
		fired := <-clock.NewTimer(d).C()
		if early := start.Add(d).Sub(fired); early > 0 {
			t.Fatalf("a %v timer fired %v early", d, early)
		}
	}
}

func TestSystemClockTimerStop(t *testing.T) {
	tm := scheduler.SystemClock().NewTimer(30 * time.Millisecond)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	case <-time.After(60 * time.Millisecond):
	}
}

// BenchmarkTimerLateness measures how late timers fire, side by side: the
// scheduler's SystemClock timer and a plain time.Timer, for durations of
// 10 to 30ms (median over the iterations, in µs).
//
//	go test -run '^$' -bench TimerLateness -benchtime 200x ./scheduler
func BenchmarkTimerLateness(b *testing.B) {
	clock := scheduler.SystemClock()
	var sys, plain []time.Duration
	for b.Loop() {
		d := 10*time.Millisecond + time.Duration(rand.N(20000))*time.Microsecond
		at := time.Now().Add(d)
		<-clock.NewTimer(d).C()
		sys = append(sys, time.Since(at))
		d = 10*time.Millisecond + time.Duration(rand.N(20000))*time.Microsecond
		at = time.Now().Add(d)
		<-time.NewTimer(d).C
		plain = append(plain, time.Since(at))
	}
	median := func(v []time.Duration) float64 {
		slices.Sort(v)
		return float64(v[len(v)/2]) / 1e3
	}
	b.ReportMetric(median(sys), "systemclock-late-us")
	b.ReportMetric(median(plain), "time.Timer-late-us")
}

//go:build !linux

package scheduler

import "time"

// sleepPrecisely sleeps for d: as precisely as the Go runtime can here.
func sleepPrecisely(d time.Duration) { time.Sleep(d) }

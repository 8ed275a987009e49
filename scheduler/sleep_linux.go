package scheduler

import (
	"syscall"
	"time"
)

// sleepPrecisely blocks for d in nanosleep, whose wake-up is precise to the
// thread's timer slack (50µs by default), unlike the runtime's 1ms.
func sleepPrecisely(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

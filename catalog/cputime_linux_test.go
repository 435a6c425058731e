package catalog

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time of the calling OS thread, so that a
// benchmark on a machine shared with other work can report the rate it would
// have alone (call runtime.LockOSThread first).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

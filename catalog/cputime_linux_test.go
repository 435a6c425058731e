package catalog

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used (all threads, so the
// collector's work is included). On a machine shared with other work, the
// rate per second of it is what the code achieves when it has the CPU to
// itself; the wall-clock rate is reported beside it.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU returns the CPU time the calling thread has used; the caller
// locks its goroutine to the thread (runtime.LockOSThread) to measure that
// goroutine's own work, whatever else the process runs.
func threadCPU() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

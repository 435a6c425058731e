//go:build linux

package benchshape

import (
	"syscall"
	"time"
)

// ThreadCPU returns the CPU time the calling thread has used, or 0 where it
// cannot be read. The caller locks its goroutine to the thread
// (runtime.LockOSThread) to measure that goroutine's own work, whatever
// else the process runs.
func ThreadCPU() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ThreadSwitches returns how often the calling thread has left its CPU:
// voluntarily (it slept: for a locked goroutine, the Go scheduler parked
// it) and involuntarily (the kernel gave the CPU to another thread, of this
// process or another). Both are 0 where they cannot be read.
func ThreadSwitches() (voluntary, involuntary int64) {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, 0
	}
	return ru.Nvcsw, ru.Nivcsw
}

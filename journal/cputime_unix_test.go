//go:build unix

package journal_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used: in
// the benchmarks, all the replicas and the proposers together.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

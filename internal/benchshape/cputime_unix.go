//go:build unix

package benchshape

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user and system, all threads, the
// collector's included) the process has used, or 0 where it cannot be
// read. On a machine shared with other work, a rate per second of it is
// what the code achieves with the CPU to itself; benchmarks report it
// beside the wall-clock rate, and omit it when it is 0.
func ProcessCPU() time.Duration {
	ru, ok := selfUsage()
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// KernelCPU returns the part of ProcessCPU spent in the kernel on the
// process's behalf (its system calls: fsyncs, socket reads and writes,
// futex waits; its page faults), or 0 where it cannot be read. Only
// fewer or cheaper system calls lower it, not faster user code.
func KernelCPU() time.Duration {
	ru, ok := selfUsage()
	if !ok {
		return 0
	}
	return time.Duration(ru.Stime.Nano())
}

// PageFaults returns the page faults (minor and major) the process has
// taken, or 0 where they cannot be read. Each first touch of fresh memory
// takes one (a new heap span, a new memtable, a growing cache); on a VM it
// can cost many microseconds of CPU, which benchmarks report per
// operation beside their CPU.
func PageFaults() int64 {
	ru, ok := selfUsage()
	if !ok {
		return 0
	}
	return ru.Minflt + ru.Majflt
}

// selfUsage returns the process's resource usage, and false where it
// cannot be read.
func selfUsage() (syscall.Rusage, bool) {
	var ru syscall.Rusage
	err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru, err == nil
}

//go:build !unix

package benchshape

import "time"

// ProcessCPU is not measured here: it returns 0, and benchmarks omit the
// figures made from it.
func ProcessCPU() time.Duration { return 0 }

// KernelCPU is not measured here: it returns 0, and benchmarks omit the
// figures made from it.
func KernelCPU() time.Duration { return 0 }

// PageFaults is not measured here: it returns 0, and benchmarks omit the
// figures made from it.
func PageFaults() int64 { return 0 }

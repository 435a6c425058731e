//go:build !linux

package catalog

import "time"

// processCPU is not available here; benchmarks then report wall time only.
func processCPU() time.Duration { return 0 }

// threadCPU is not available here; benchmarks then report wall time only.
func threadCPU() time.Duration { return 0 }

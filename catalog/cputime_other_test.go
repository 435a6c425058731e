//go:build !linux

package catalog

import "time"

// threadCPU is not available here; benchmarks then report wall time only.
func threadCPU() time.Duration { return 0 }

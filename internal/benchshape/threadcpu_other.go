//go:build !linux

package benchshape

import "time"

// ThreadCPU is not measured here: it returns 0, and benchmarks omit the
// figures made from it.
func ThreadCPU() time.Duration { return 0 }

// ThreadSwitches is not measured here: it returns 0, 0.
func ThreadSwitches() (voluntary, involuntary int64) { return 0, 0 }

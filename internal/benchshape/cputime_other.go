//go:build !unix

package benchshape

import "time"

// ProcessCPU is not measured here: it returns 0, and benchmarks omit the
// figures made from it.
func ProcessCPU() time.Duration { return 0 }

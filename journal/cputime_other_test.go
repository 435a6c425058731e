//go:build !unix

package journal_test

import "time"

// processCPU is not measured here: the benchmarks omit the figure.
func processCPU() time.Duration { return 0 }

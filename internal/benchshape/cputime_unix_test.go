//go:build unix

package benchshape

import "testing"

// TestProcessCPU checks that the CPU time grows while this goroutine
// computes.
func TestProcessCPU(t *testing.T) {
	start := ProcessCPU()
	if start <= 0 {
		t.Fatalf("ProcessCPU = %v at the start of a test", start)
	}
	x := uint64(1)
	for range 1000 {
		for range 100_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if ProcessCPU() > start {
			return
		}
	}
	t.Fatalf("ProcessCPU stayed at %v over 10^8 steps (%d)", start, x)
}

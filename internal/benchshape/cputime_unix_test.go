//go:build unix

package benchshape

import (
	"syscall"
	"testing"
)

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

// TestPageFaults checks that touching fresh anonymous memory, page by
// page, counts at least a fault per page.
func TestPageFaults(t *testing.T) {
	const pages = 256
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, pages*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(mem) }()
	start := PageFaults()
	for i := 0; i < pages; i++ {
		mem[i*page] = 1
	}
	if got := PageFaults() - start; got < pages {
		t.Fatalf("touching %d fresh pages counted %d faults", pages, got)
	}
}

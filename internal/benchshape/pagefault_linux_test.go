package benchshape

import (
	"syscall"
	"testing"
)

// BenchmarkPageFault measures the machine, not metatree: the CPU the first
// touch of a fresh page of anonymous memory costs (the fault, the zeroed
// page), per 4 KiB, with base pages and with transparent huge pages asked
// for (madvise), as BenchmarkPropose's faults/op are quoted against it.
// Pebble's memtables and the Go heap use base pages where transparent
// huge pages are only given on request.
func BenchmarkPageFault(b *testing.B) {
	const size = 64 << 20
	page := syscall.Getpagesize()
	for _, huge := range []bool{false, true} {
		name := "pages=base"
		if huge {
			name = "pages=huge-madvise"
		}
		b.Run(name, func(b *testing.B) {
			var touched int
			cpu := ProcessCPU()
			for b.Loop() {
				mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
				if err != nil {
					b.Fatal(err)
				}
				if huge {
					_ = syscall.Madvise(mem, 14) // MADV_HUGEPAGE; ignored where unsupported
				}
				for i := 0; i < size; i += page {
					mem[i] = 1
				}
				touched += size / page
				if err := syscall.Munmap(mem); err != nil {
					b.Fatal(err)
				}
			}
			if spent := ProcessCPU() - cpu; spent > 0 {
				b.ReportMetric(float64(spent.Nanoseconds())/float64(touched)/1e3*float64(4096/page), "cpu-us/4KiB")
			}
		})
	}
}

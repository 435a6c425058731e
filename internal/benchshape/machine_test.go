package benchshape

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMemoryLatency measures the machine, not metatree: the time of
// one load from memory at a random cache line of a buffer, each load's
// address coming from the one before (a pointer chase, so that nothing
// overlaps), and with chains=4 the time of one round of four such chases
// run side by side (what a lookup gains by issuing its loads together). A catalog read that
// misses the cache costs at least its dependent rounds times this figure;
// the catalog's read benchmarks are quoted against it, taken in the same
// sitting. The sizes are about the heaps of the read benchmarks' three
// catalogs, a tenth, one and four times the Doris shape: a lookup that
// misses once in each costs at least these three figures.
func BenchmarkMemoryLatency(b *testing.B) {
	for _, mib := range []int{40, 400, 1600} {
		for _, chains := range []int{1, 4} {
			b.Run(fmt.Sprintf("size=%dMiB/chains=%d", mib, chains), func(b *testing.B) {
				next := chaseCycle(mib << 20)
				var at [4]uint32
				for c := range chains {
					at[c] = uint32(c * len(next) / 4 / lineWords * lineWords)
				}
				b.ResetTimer()
				for b.Loop() {
					for c := range chains {
						at[c] = next[at[c]]
					}
				}
				if at[0] == at[1] && chains > 1 {
					b.Fatal("two chains met: the cycle is broken")
				}
			})
		}
	}
}

// lineWords is the uint32s in a 64-byte cache line.
const lineWords = 16

// chaseCycle returns a buffer of size bytes whose first word of each cache
// line holds the index of the next line's, the lines visited in one
// random cycle.
func chaseCycle(size int) []uint32 {
	next := make([]uint32, size/4)
	lines := len(next) / lineWords
	order := rand.New(rand.NewPCG(1, 2)).Perm(lines)
	for i, l := range order {
		next[l*lineWords] = uint32(order[(i+1)%lines] * lineWords)
	}
	return next
}

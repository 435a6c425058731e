package dedupe_test

import (
	"math/rand/v2"
	"testing"

	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
)

// BenchmarkJudgeRecord: the applier's path for fresh keys once the window
// is full and sliding (every entry evicts one): a Judge and a Record an
// entry, as each replica does for each user entry. With stream=16KiB,
// each entry is followed by 16 KiB written into a 64 MiB ring (what the
// rest of a write does to the caches: entries copied into memtables, WAL
// and network buffers), so the window's memory is cold as in a process
// (its cost is the difference from the stream alone, stream=16KiB/window=0).
func BenchmarkJudgeRecord(b *testing.B) {
	for _, stream := range []int{0, 16 << 10} {
		for _, window := range []uint64{0, 1_000, 10_000, 100_000} {
			if window == 0 && stream == 0 {
				continue
			}
			name := "stream=0/window=" + itoa(window)
			if stream > 0 {
				name = "stream=16KiB/window=" + itoa(window)
			}
			b.Run(name, func(b *testing.B) { benchJudgeRecord(b, window, stream) })
		}
	}
}

// benchJudgeRecord runs BenchmarkJudgeRecord at one window and stream.
func benchJudgeRecord(b *testing.B, window uint64, stream int) {
	d := dedupe.New(window)
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() (k [16]byte) {
		for i := range 2 {
			v := rng.Uint64()
			for j := range 8 {
				k[i*8+j] = byte(v >> (8 * j))
			}
		}
		return k
	}
	index := uint64(0)
	for range 4 * window { // fill and slide: the steady state
		index++
		d.Add(index, key(), nil)
	}
	keys := make([][16]byte, 1<<18)
	for i := range keys {
		keys[i] = key()
	}
	ring := make([]byte, 64<<20)
	src := make([]byte, max(stream, 1))
	at := 0
	b.ResetTimer()
	for i := range b.N {
		if stream > 0 {
			at += copy(ring[at:], src)
			if at == len(ring) {
				at = 0
			}
		}
		if window == 0 {
			continue
		}
		index++
		env := envelope.Envelope{Key: keys[i&(len(keys)-1)]}
		prev, v := d.Judge(index, env)
		if v != dedupe.Expired {
			d.Record(index, env.Key, prev, v, nil)
		}
	}
}

func itoa(n uint64) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

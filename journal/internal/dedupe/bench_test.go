package dedupe_test

import (
	"math/rand/v2"
	"testing"

	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
)

// BenchmarkJudgeRecord: the applier's path for fresh keys once the window
// is full and sliding (every entry evicts one): a Judge and a Record an
// entry, as each replica does for each user entry.
func BenchmarkJudgeRecord(b *testing.B) {
	for _, window := range []uint64{1_000, 10_000, 100_000} {
		b.Run("window="+itoa(window), func(b *testing.B) {
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
			b.ResetTimer()
			for i := range b.N {
				index++
				env := envelope.Envelope{Key: keys[i&(len(keys)-1)]}
				prev, v := d.Judge(index, env)
				if v != dedupe.Expired {
					d.Record(index, env.Key, prev, v, nil)
				}
			}
		})
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

package dedupe

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The key filter never misses a key added since its reset, and passes few
// that were not: at most 1% at 16 bits a key (a window of 16,384 keys in
// 2^18 bits, the fewest bits a key reset gives), fewer with more.
func TestKeyFilter(t *testing.T) {
	for _, window := range []int{10_000, 16_384} {
		f := newKeyFilter(uint64(window))
		rng := rand.New(rand.NewPCG(5, 6))
		key := func() (k [16]byte) {
			for i := range k {
				k[i] = byte(rng.Uint32())
			}
			return k
		}
		added := make([][16]byte, window)
		for i := range added {
			added[i] = key()
			f.add(added[i])
		}
		for _, k := range added {
			require.True(t, f.mayHold(k))
		}
		passed := 0
		for range 100_000 {
			if f.mayHold(key()) {
				passed++
			}
		}
		t.Logf("window %d: %d of 100,000 keys never added passed", window, passed)
		require.Less(t, passed, 1_000, "window %d: false positives of 100,000 keys never added", window)
		f.reset(uint64(window))
		require.False(t, f.mayHold(added[0]), "a reset filter holds nothing")
	}
}

// A filter for a window past its cap keeps its size and still holds every
// key added.
func TestKeyFilterOfAHugeWindowIsCapped(t *testing.T) {
	f := newKeyFilter(1 << 40)
	require.Equal(t, maxFilterBits/64, len(f.words))
	keys := make([][16]byte, 50_000)
	for i := range keys {
		keys[i] = [16]byte{byte(i), byte(i >> 8), byte(i >> 16), 7}
		f.add(keys[i])
	}
	for _, k := range keys {
		require.True(t, f.mayHold(k))
	}
}

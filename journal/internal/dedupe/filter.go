package dedupe

import "hash/maphash"

// keyFilter is a Bloom filter of idempotency keys: mayHold is false only
// for a key never added since the last reset. It is sized for a window of
// keys at about 0.2% false positives (16 bits a key, three probes), and
// small enough to stay in cache where the window's map does not. Its size
// is capped at maxFilterBits: a larger window passes more keys it never
// saw (each costs a map lookup), never misses one.
type keyFilter struct {
	seed maphash.Seed
	bits []uint64
	mask uint64 // of a bit position
}

func newKeyFilter(window uint64) *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed()}
	f.reset(window)
	return f
}

// maxFilterBits caps a filter at 2 MiB (16 bits a key up to a million).
const maxFilterBits = 1 << 24

// reset empties the filter, sized for window keys.
func (f *keyFilter) reset(window uint64) {
	n := uint64(1 << 10) // bits
	for n < 16*window && n < maxFilterBits {
		n <<= 1
	}
	if uint64(len(f.bits))*64 != n {
		f.bits = make([]uint64, n/64)
	} else {
		clear(f.bits)
	}
	f.mask = n - 1
}

// add records key.
func (f *keyFilter) add(key [16]byte) {
	h := maphash.Bytes(f.seed, key[:])
	for range 3 {
		b := h & f.mask
		f.bits[b/64] |= 1 << (b % 64)
		h = h>>21 | h<<43
	}
}

// mayHold reports whether key may have been added.
func (f *keyFilter) mayHold(key [16]byte) bool {
	h := maphash.Bytes(f.seed, key[:])
	for range 3 {
		b := h & f.mask
		if f.bits[b/64]&(1<<(b%64)) == 0 {
			return false
		}
		h = h>>21 | h<<43
	}
	return true
}

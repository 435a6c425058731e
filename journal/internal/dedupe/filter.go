package dedupe

import "hash/maphash"

// keyFilter is a Bloom filter of idempotency keys: mayHold is false only
// for a key never added since the last reset. It is blocked: a key's three
// bits lie in one 64-bit word, so adding or testing a key touches one
// cache line (the applier does both for every entry, with the rest of the
// write evicting the filter between entries). At 16 bits a key it
// passes under 1% of the keys never added (TestKeyFilter bounds it), each
// of which costs a map lookup. Its size is capped at maxFilterBits: a larger
// window passes more keys it never saw, never misses one.
type keyFilter struct {
	seed  maphash.Seed
	words []uint64
	mask  uint64 // of a word index
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
	if uint64(len(f.words))*64 != n {
		f.words = make([]uint64, n/64)
	} else {
		clear(f.words)
	}
	f.mask = n/64 - 1
}

// probe returns the word that holds key's bits and the bits.
func (f *keyFilter) probe(key [16]byte) (*uint64, uint64) {
	h := maphash.Bytes(f.seed, key[:])
	// The word comes from the low bits, the three bit positions from the
	// top 18, which the word index never uses (it has at most 18 bits).
	bits := uint64(1)<<(h>>46&63) | uint64(1)<<(h>>52&63) | uint64(1)<<(h>>58)
	return &f.words[h&f.mask], bits
}

// add records key.
func (f *keyFilter) add(key [16]byte) {
	w, bits := f.probe(key)
	*w |= bits
}

// mayHold reports whether key may have been added.
func (f *keyFilter) mayHold(key [16]byte) bool {
	w, bits := f.probe(key)
	return *w&bits == bits
}

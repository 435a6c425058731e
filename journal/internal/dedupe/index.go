package dedupe

import "hash/maphash"

// keyIndex is one generation's index of the window's keys: each key to the
// sequence number of its latest copy in the generation (a position in
// Window.order). It is an open-addressing table with linear probing, at
// most half full, whose 8-byte slots hold a 24-bit fingerprint of the
// key's hash and the copy's position in the generation. Nearly every key
// the applier looks up is fresh: such a lookup reads one run of slots,
// usually within one cache line, and compares no key unless a fingerprint
// matches. The window probes two generations and inserts into one, so a
// fresh key costs it two cache lines, where a map (its control word, then
// its slot) and a filter of each generation cost about four
// (BenchmarkJudgeRecord/stream=16KiB).
type keyIndex struct {
	slots []uint64 // 0: empty; else fingerprint<<relBits | (seq - first + 1)
	mask  uint64
	first uint64 // the sequence number of the generation's first copy
	count int    // slots in use
}

const (
	relBits = 40 // a generation holds fewer than 2^40 copies
	relMask = 1<<relBits - 1
	// A reset table has room for the window's keys at half load, between
	// minSlots and maxInitialSlots: past that it grows only as keys
	// arrive, so a huge window allocates nothing up front.
	minSlots        = 16
	maxInitialSlots = 1 << 18
)

// copies is the window's order as the indexes read it: order[i] is the
// copy with sequence number base+i, and those before live are evicted.
type copies struct {
	order []Key
	base  uint64
	live  uint64
}

// key returns the key of the copy seq, false when it is evicted.
func (c copies) key(seq uint64) ([16]byte, bool) {
	if seq < c.live {
		return [16]byte{}, false
	}
	return c.order[seq-c.base].Key, true
}

func hashKey(seed maphash.Seed, key [16]byte) uint64 { return maphash.Bytes(seed, key[:]) }

// fingerprint is the top 24 bits of a key's hash; the slot comes from its
// low bits.
func fingerprint(h uint64) uint64 { return h >> relBits }

// reset empties the index for a generation of about window keys whose
// first copy is sequence number first. A table already as large is
// cleared and kept.
func (x *keyIndex) reset(window, first uint64) {
	n := uint64(minSlots)
	for n < 2*window && n < maxInitialSlots {
		n <<= 1
	}
	if uint64(len(x.slots)) >= n {
		clear(x.slots)
	} else {
		x.slots = make([]uint64, n)
		x.mask = n - 1
	}
	x.first, x.count = first, 0
}

// find returns the sequence number of key's live copy in the index (h is
// its hash), or, when there is none, the empty slot where it would go. A
// slot of an evicted copy matches no key: the key's next copy takes
// another slot.
func (x *keyIndex) find(h uint64, key [16]byte, c copies) (slot, seq uint64, ok bool) {
	fp := fingerprint(h)
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return i, 0, false
		}
		if s>>relBits != fp {
			continue
		}
		seq := x.first + s&relMask - 1
		if k, live := c.key(seq); live && k == key {
			return i, seq, true
		}
	}
}

// put makes seq, a copy already in c, key's latest copy in the index.
func (x *keyIndex) put(seed maphash.Seed, h uint64, key [16]byte, seq uint64, c copies) {
	i, _, found := x.find(h, key, c)
	x.slots[i] = fingerprint(h)<<relBits | (seq - x.first + 1)
	if found {
		return
	}
	if x.count++; uint64(x.count)*2 > uint64(len(x.slots)) {
		x.grow(seed, c)
	}
}

// grow doubles the table, hashing each live copy's key again from the
// order; the slots of evicted copies are dropped.
func (x *keyIndex) grow(seed maphash.Seed, c copies) {
	old := x.slots
	x.slots = make([]uint64, 2*len(old))
	x.mask = uint64(len(x.slots)) - 1
	x.count = 0
	for _, s := range old {
		if s == 0 {
			continue
		}
		k, live := c.key(x.first + s&relMask - 1)
		if !live {
			continue
		}
		h := hashKey(seed, k)
		i := h & x.mask
		for x.slots[i] != 0 {
			i = (i + 1) & x.mask
		}
		x.slots[i] = fingerprint(h)<<relBits | s&relMask
		x.count++
	}
}

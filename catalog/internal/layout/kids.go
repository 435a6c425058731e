package layout

import (
	"errors"
	"fmt"
)

// ErrCapacity is the error of a child list allocation past the pool's
// capacity. Package catalog exports it as its own ErrCapacity, which its
// other layout limits (the ids) wrap too.
var ErrCapacity = errors.New("catalog: capacity exceeded")

// KidPool holds every child list in a few large pointer-free arrays instead
// of one Go slice per parent (24 bytes of header plus an allocation each,
// which for a million tablets of three replicas costs more than the lists).
// A list is a region [len, cap, slot...] of a chunk; its handle is
// chunk<<kidOffBits | offset, and 0 means "no list". Regions come in size
// classes with a free list each; a list that outgrows its region moves to
// the next class. Lists too big for a chunk get a chunk of their own, whose
// index is reused once the list is released. A handle addresses at most
// kidMaxChunks chunks; an allocation past them fails (ErrCapacity) rather
// than wrap.
type KidPool struct {
	chunks [][]uint32
	cur    int                       // the chunk class regions are cut from, once chunks is not empty
	free   [len(kidClasses)][]uint32 // free regions by class
	// spare are indexes of chunks dropped with their own list, taken
	// before chunks grows: a handle has room for kidMaxChunks of them.
	spare []uint32
	// maxChunks overrides kidMaxChunks in tests (0: kidMaxChunks).
	maxChunks int
}

const (
	kidOffBits   = 20
	kidChunk     = 1 << kidOffBits
	kidOffMask   = kidChunk - 1
	kidMaxChunks = 1 << (32 - kidOffBits)
	// kidReserve chunk indexes are left to rollback and Load: undoing a
	// failed batch re-links the children it unlinked, and must not fail
	// for want of a chunk the batch's own growth took.
	kidReserve = 64
)

// KidBudget says how many chunk indexes an allocation may bring into use.
type KidBudget uint8

const (
	KidForward  KidBudget = iota // an operation of a batch: leaves the reserve
	KidRollback                  // undoing a batch, or loading an image: may use it
)

// kidsFull is the error of an allocation past the pool's capacity.
func (p *KidPool) kidsFull() error {
	return fmt.Errorf("%w: child lists use all %d chunks of %d slots their handles can address", ErrCapacity, p.limit(), kidChunk)
}

func (p *KidPool) limit() int {
	if p.maxChunks > 0 {
		return p.maxChunks
	}
	return kidMaxChunks
}

// newChunk brings c into use under a free chunk index: one dropped before,
// else the next one, within budget.
func (p *KidPool) newChunk(c []uint32, b KidBudget) (uint32, bool) {
	if k := len(p.spare); k > 0 {
		i := p.spare[k-1]
		p.spare = p.spare[:k-1]
		p.chunks[i] = c
		return i, true
	}
	limit := p.limit()
	if b == KidForward {
		limit -= min(kidReserve, limit/2)
	}
	if len(p.chunks) >= limit {
		return 0, false
	}
	p.chunks = append(p.chunks, c)
	return uint32(len(p.chunks) - 1), true
}

// LargestKidClass is the capacity of the largest size class: a list of
// more slots gets a chunk of its own.
const LargestKidClass = 786432

// kidClasses are the region capacities (slots, not counting the header).
var kidClasses = [...]uint32{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
	768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536,
	98304, 131072, 196608, 262144, 393216, 524288, LargestKidClass}

func classFor(n uint32) int {
	for i, c := range kidClasses {
		if c >= n {
			return i
		}
	}
	return -1 // needs a chunk of its own
}

// Region returns the region of list h: its length, its capacity, then
// its slots and the room after them.
func (p *KidPool) Region(h uint32) []uint32 {
	c := p.chunks[h>>kidOffBits]
	off := h & kidOffMask
	return c[off:]
}

// List returns the slots of list h (nil for 0).
func (p *KidPool) List(h uint32) []uint32 {
	if h == 0 {
		return nil
	}
	r := p.Region(h)
	return r[2 : 2+r[0] : 2+r[0]]
}

// minKids is the smallest region a list gets: growing 1, 2, 3 would move a
// tablet's three replicas twice.
const minKids = 3

// alloc returns an empty list with room for at least n slots; false when
// it needs a chunk and none is left within budget.
func (p *KidPool) alloc(n uint32, b KidBudget) (uint32, bool) {
	n = max(n, minKids)
	if len(p.chunks) == 0 {
		p.chunks = append(p.chunks, make([]uint32, 1, kidChunk)) // offset 0 is never a list
		p.cur = 0
	}
	ci := classFor(n)
	if ci < 0 {
		n += n / 4 // headroom, so that growing a huge list is amortised
		// The whole region, not just its header: insert copies into it,
		// and spare capacity would be handed out as class regions.
		c := make([]uint32, 2+n)
		c[1] = n
		i, ok := p.newChunk(c, b)
		return i << kidOffBits, ok
	}
	if f := p.free[ci]; len(f) > 0 {
		h := f[len(f)-1]
		p.free[ci] = f[:len(f)-1]
		p.Region(h)[0] = 0
		return h, true
	}
	capn := kidClasses[ci]
	c := p.chunks[p.cur]
	if cap(c) < kidChunk || uint32(cap(c)-len(c)) < 2+capn {
		c = make([]uint32, 0, kidChunk)
		i, ok := p.newChunk(c, b)
		if !ok {
			return 0, false
		}
		p.cur = int(i)
	}
	off := uint32(len(c))
	c = c[:len(c)+int(2+capn)]
	c[off], c[off+1] = 0, capn
	p.chunks[p.cur] = c
	return uint32(p.cur)<<kidOffBits | off, true
}

func (p *KidPool) release(h uint32) {
	r := p.Region(h)
	ci := classFor(r[1])
	if ci < 0 || kidClasses[ci] != r[1] {
		i := h >> kidOffBits // an own chunk: drop it, keep its index
		p.chunks[i] = nil
		p.spare = append(p.spare, i)
		return
	}
	p.free[ci] = append(p.free[ci], h)
}

// room returns the handle of list h (0: none yet) with room for one more
// slot: the list is allocated, or moved to the next class, when it has
// none. It fails with ErrCapacity, leaving the list as it was, when that
// needs a chunk and none is left within budget.
func (p *KidPool) room(h uint32, b KidBudget) (uint32, error) {
	if h == 0 {
		nh, ok := p.alloc(1, b)
		if !ok {
			return 0, p.kidsFull()
		}
		return nh, nil
	}
	r := p.Region(h)
	n, capn := r[0], r[1]
	if n < capn {
		return h, nil
	}
	nh, ok := p.alloc(n+1, b)
	if !ok {
		return h, p.kidsFull()
	}
	nr := p.Region(nh)
	copy(nr[2:], r[2:2+n])
	nr[0] = n
	p.release(h)
	return nh, nil
}

// Insert puts slot at position pos of list h and returns the list's
// (possibly new) handle; it fails as room does, leaving the list as it was.
func (p *KidPool) Insert(h uint32, pos int, slot uint32, b KidBudget) (uint32, error) {
	h, err := p.room(h, b)
	if err != nil {
		return h, err
	}
	r := p.Region(h)
	n := r[0]
	l := r[2 : 3+n]
	copy(l[pos+1:], l[pos:n])
	l[pos] = slot
	r[0] = n + 1
	return h, nil
}

// Remove deletes position pos of list h and returns its handle, 0 once the
// list is empty.
func (p *KidPool) Remove(h uint32, pos int) uint32 {
	r := p.Region(h)
	n := r[0]
	l := r[2 : 2+n]
	copy(l[pos:], l[pos+1:])
	r[0] = n - 1
	if n == 1 {
		p.release(h)
		return 0
	}
	return h
}

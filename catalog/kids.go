package catalog

// kidPool holds every child list in a few large pointer-free arrays instead
// of one Go slice per parent (24 bytes of header plus an allocation each,
// which for a million tablets of three replicas costs more than the lists).
// A list is a region [len, cap, slot...] of a chunk; its handle is
// chunk<<kidOffBits | offset, and 0 means "no list". Regions come in size
// classes with a free list each; a list that outgrows its region moves to
// the next class. Lists too big for a chunk get a chunk of their own.
type kidPool struct {
	chunks [][]uint32
	free   [len(kidClasses)][]uint32 // free regions by class
}

const (
	kidOffBits = 20
	kidChunk   = 1 << kidOffBits
	kidOffMask = kidChunk - 1
)

// kidClasses are the region capacities (slots, not counting the header).
var kidClasses = [...]uint32{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
	768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536,
	98304, 131072, 196608, 262144, 393216, 524288, 786432}

func classFor(n uint32) int {
	for i, c := range kidClasses {
		if c >= n {
			return i
		}
	}
	return -1 // needs a chunk of its own
}

func (p *kidPool) region(h uint32) []uint32 {
	c := p.chunks[h>>kidOffBits]
	off := h & kidOffMask
	return c[off:]
}

// list returns the slots of list h (nil for 0).
func (p *kidPool) list(h uint32) []uint32 {
	if h == 0 {
		return nil
	}
	r := p.region(h)
	return r[2 : 2+r[0] : 2+r[0]]
}

// minKids is the smallest region a list gets: growing 1, 2, 3 would move a
// tablet's three replicas twice.
const minKids = 3

// alloc returns an empty list with room for at least n slots.
func (p *kidPool) alloc(n uint32) uint32 {
	n = max(n, minKids)
	if len(p.chunks) == 0 {
		p.chunks = append(p.chunks, make([]uint32, 1, kidChunk)) // offset 0 is never a list
	}
	ci := classFor(n)
	if ci < 0 {
		n += n / 4 // headroom, so that growing a huge list is amortised
		// The whole region, not just its header: insert copies into it,
		// and spare capacity would be handed out as class regions.
		c := make([]uint32, 2+n)
		c[1] = n
		p.chunks = append(p.chunks, c)
		return uint32(len(p.chunks)-1) << kidOffBits
	}
	if f := p.free[ci]; len(f) > 0 {
		h := f[len(f)-1]
		p.free[ci] = f[:len(f)-1]
		p.region(h)[0] = 0
		return h
	}
	capn := kidClasses[ci]
	last := len(p.chunks) - 1
	c := p.chunks[last]
	if cap(c) < kidChunk || uint32(cap(c)-len(c)) < 2+capn {
		c = make([]uint32, 0, kidChunk)
		p.chunks = append(p.chunks, c)
		last++
	}
	off := uint32(len(c))
	c = c[:len(c)+int(2+capn)]
	c[off], c[off+1] = 0, capn
	p.chunks[last] = c
	return uint32(last)<<kidOffBits | off
}

func (p *kidPool) release(h uint32) {
	r := p.region(h)
	ci := classFor(r[1])
	if ci < 0 || kidClasses[ci] != r[1] {
		p.chunks[h>>kidOffBits] = nil // an own chunk: drop it
		return
	}
	p.free[ci] = append(p.free[ci], h)
}

// insert puts slot at position pos of list h and returns the list's
// (possibly new) handle.
func (p *kidPool) insert(h uint32, pos int, slot uint32) uint32 {
	if h == 0 {
		h = p.alloc(1)
	}
	r := p.region(h)
	n, capn := r[0], r[1]
	if n == capn {
		nh := p.alloc(n + 1)
		nr := p.region(nh)
		copy(nr[2:], r[2:2+n])
		nr[0] = n
		p.release(h)
		h, r = nh, nr
	}
	l := r[2 : 3+n]
	copy(l[pos+1:], l[pos:n])
	l[pos] = slot
	r[0] = n + 1
	return h
}

// remove deletes position pos of list h and returns its handle, 0 once the
// list is empty.
func (p *kidPool) remove(h uint32, pos int) uint32 {
	r := p.region(h)
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

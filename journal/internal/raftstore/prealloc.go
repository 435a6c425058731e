package raftstore

import (
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walPreallocStep is how far ahead of its writes a WAL's blocks are
// allocated.
const walPreallocStep = 1 << 20

// preallocation allocates a WAL's blocks a step ahead of its writes,
// within the range Pebble asked to preallocate. Pebble asks for 110% of a
// memtable when it starts a WAL (35 MiB with this store's memtable) and
// an idle node would hold all of it: most of the disk a node with an empty
// log occupies. Allocated a step ahead, the appends still land in blocks
// the filesystem allocated before them (what preallocation buys the WAL's
// fsync), at the cost of one allocation call a step; a recycled WAL has
// its blocks already. Each step also extends the file's size where the
// filesystem allows it (extendFile): an append inside the size leaves the
// inode's size alone, so its fdatasync need not commit one (a one-entry
// append: BenchmarkAppend's cpu-us/append). Pebble reads a WAL's zeroed
// tail as its end, as it reads a recycled WAL's stale tail.
type preallocation struct {
	mu        sync.Mutex
	pos       int64 // the end of what was written
	allocated int64 // the blocks before this offset are allocated
	wanted    int64 // the end of the range Pebble asked for
}

// request records Pebble's request to preallocate [offset, offset+length)
// and allocates the first step of it.
func (p *preallocation) request(f vfs.File, offset, length int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wanted = max(p.wanted, offset+length)
	p.allocated = max(p.allocated, min(offset, p.pos))
	return p.ahead(f)
}

// wrote records n bytes appended and allocates the next step once the
// writes come within half a step of the allocated end. A failed
// allocation is no storage failure (see haltFile.Preallocate): the writes
// then allocate as they go.
func (p *preallocation) wrote(f vfs.File, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pos += int64(n)
	if p.allocated-p.pos < walPreallocStep/2 {
		_ = p.ahead(f)
	}
}

// ahead allocates up to a step past the writes, within the wanted range.
func (p *preallocation) ahead(f vfs.File) error {
	target := min(p.wanted, p.pos+walPreallocStep)
	if target <= p.allocated {
		return nil
	}
	start := p.allocated
	p.allocated = target
	return extendFile(f, start, target-start)
}

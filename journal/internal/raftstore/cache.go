package raftstore

import (
	"go.etcd.io/raft/v3/raftpb"
)

// entryCache holds the most recently appended entries, contiguous and ending
// at the last index (end() == last+1 always, also when empty), bounded in
// bytes. Entries are shared with raft and
// never mutated. Guarded by Store.mu.
type entryCache struct {
	limit int64
	first uint64 // index of ents[0]; ents cover [first, first+len)
	ents  []*raftpb.Entry
	bytes int64
}

// entryBytes is the cache's size estimate of one entry.
func entryBytes(e *raftpb.Entry) int64 { return int64(len(e.Data)) + 48 }

// reset empties the cache; the next entry appended will be at next.
func (c *entryCache) reset(next uint64) {
	c.first = next
	c.ents = nil
	c.bytes = 0
}

// end returns the index after the last cached entry.
func (c *entryCache) end() uint64 { return c.first + uint64(len(c.ents)) }

// append adds contiguous entries, dropping any cached suffix they replace.
func (c *entryCache) append(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	if c.limit < 0 {
		c.reset(ents[len(ents)-1].GetIndex() + 1)
		return
	}
	lo := ents[0].GetIndex()
	switch {
	case lo < c.first || lo > c.end():
		// Replacing entries older than the cache, or a gap: start afresh.
		c.reset(lo)
	case lo < c.end():
		for _, e := range c.ents[lo-c.first:] {
			c.bytes -= entryBytes(e)
		}
		// Clear the dropped pointers so they can be collected, then cut.
		clear(c.ents[lo-c.first:])
		c.ents = c.ents[:lo-c.first]
	}
	for _, e := range ents {
		c.bytes += entryBytes(e)
	}
	c.ents = append(c.ents, ents...)
	c.evict()
}

// evict drops the oldest entries until the cache fits its limit.
func (c *entryCache) evict() {
	n := 0
	for c.bytes > c.limit && n < len(c.ents) {
		c.bytes -= entryBytes(c.ents[n])
		n++
	}
	if n == 0 {
		return
	}
	clear(c.ents[:n])
	c.ents = c.ents[n:]
	c.first += uint64(n)
	// Re-home the slice once most of its backing array is dead space.
	if cap(c.ents) > 1024 && len(c.ents) < cap(c.ents)/4 {
		c.ents = append(make([]*raftpb.Entry, 0, 2*len(c.ents)), c.ents...)
	}
}

// truncateFront drops cached entries with index <= index (after Compact).
func (c *entryCache) truncateFront(index uint64) {
	if index < c.first {
		return
	}
	if index+1 >= c.end() {
		c.reset(c.end())
		return
	}
	n := index + 1 - c.first
	for _, e := range c.ents[:n] {
		c.bytes -= entryBytes(e)
	}
	clear(c.ents[:n])
	c.ents = c.ents[n:]
	c.first = index + 1
}

// truncateBack drops cached entries with index >= next, so that the cache
// ends before next (a view cut to last = next-1).
func (c *entryCache) truncateBack(next uint64) {
	switch {
	case next >= c.end():
		return
	case next <= c.first:
		c.reset(next)
		return
	}
	n := next - c.first
	for _, e := range c.ents[n:] {
		c.bytes -= entryBytes(e)
	}
	clear(c.ents[n:])
	c.ents = c.ents[:n]
}

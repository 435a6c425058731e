package raftstore

import (
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var _ raft.Storage = (*Store)(nil)

// InitialState implements raft.Storage: the durable HardState and the
// ConfState of the current snapshot (the state as of the image the journal
// loads, which is raft's Applied at restart).
func (s *Store) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, nil, ErrClosed
	}
	hs := proto.Clone(s.mu.hs).(*raftpb.HardState)
	var cs *raftpb.ConfState
	if c := s.mu.snap.GetMetadata().GetConfState(); c != nil {
		cs = proto.Clone(c).(*raftpb.ConfState)
	}
	// EnsureConfState fills nil fields in place: only ever on our copy.
	return hs, raftpb.EnsureConfState(cs), nil
}

// FirstIndex implements raft.Storage.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return 0, ErrClosed
	}
	return s.mu.trunc.index + 1, nil
}

// LastIndex implements raft.Storage. With an empty log it is FirstIndex()-1.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return 0, ErrClosed
	}
	return s.mu.last, nil
}

// Snapshot implements raft.Storage: the latest image recorded with
// SetSnapshot or received through Append. Before any image exists it
// returns raft.ErrSnapshotTemporarilyUnavailable, so raft retries later
// instead of sending an empty snapshot.
func (s *Store) Snapshot() (*raftpb.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	if raft.IsEmptySnap(s.mu.snap) {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	// EnsureSnapshot fills nil fields in place: only ever on our copy.
	return raftpb.EnsureSnapshot(proto.Clone(s.mu.snap).(*raftpb.Snapshot)), nil
}

// Term implements raft.Storage. It answers for FirstIndex()-1 from the
// truncation record.
func (s *Store) Term(i uint64) (uint64, error) {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return 0, ErrClosed
	}
	trunc, last, c := s.mu.trunc, s.mu.last, &s.mu.cache
	switch {
	case i == trunc.index:
		s.mu.RUnlock()
		return trunc.term, nil
	case i < trunc.index:
		s.mu.RUnlock()
		return 0, raft.ErrCompacted
	case i > last:
		s.mu.RUnlock()
		return 0, raft.ErrUnavailable
	case i >= c.first && i < c.end():
		t := c.ents[i-c.first].GetTerm()
		s.mu.RUnlock()
		return t, nil
	}
	// A point read is short: do it under the read lock, so a concurrent
	// Compact cannot remove the entry between the check and the read.
	defer s.mu.RUnlock()
	v, closer, err := s.db.Get(entryKey(i))
	if err != nil {
		return 0, s.readFailed(fmt.Errorf("raftstore: term of %d (log %d..%d): %w", i, trunc.index+1, last, err))
	}
	defer closer.Close()
	t, err := decodeEntryTerm(v)
	if err != nil {
		return 0, s.readFailed(fmt.Errorf("raftstore: term of %d: %w", i, err))
	}
	return t, nil
}

// Entries implements raft.Storage: entries [lo, hi), at least one if any,
// at most maxSize bytes (proto.Size, as raft counts) beyond the first. The
// slice is freshly allocated; the entries must not be mutated.
func (s *Store) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	trunc, last, c := s.mu.trunc, s.mu.last, &s.mu.cache
	if lo <= trunc.index {
		s.mu.RUnlock()
		return nil, raft.ErrCompacted
	}
	if hi > last+1 {
		s.mu.RUnlock()
		return nil, raft.ErrUnavailable
	}
	if lo >= hi {
		s.mu.RUnlock()
		return nil, nil
	}
	// Copy the cached part under the lock: a writer may reuse the cache's
	// backing array once the lock is released.
	var cached []*raftpb.Entry
	from := max(lo, c.first)
	if from < hi {
		cached = make([]*raftpb.Entry, hi-from)
		copy(cached, c.ents[from-c.first:hi-c.first])
	}
	diskHi := min(hi, c.first)
	if lo >= diskHi {
		s.mu.RUnlock()
		return limitSize(cached, maxSize), nil
	}
	// Create the iterator under the lock so that it sees exactly the log
	// the view describes (a writer that deletes or overwrites entries
	// applies its batch under the write lock and cuts the view with it).
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(lo), UpperBound: entryKey(diskHi)})
	if err != nil {
		s.mu.RUnlock()
		return nil, s.readFailed(fmt.Errorf("raftstore: entries [%d,%d): %w", lo, hi, err))
	}
	s.readers.Add(1)
	s.mu.RUnlock()
	defer s.readers.Done()

	out, size, err := readEntries(it, lo, diskHi, maxSize)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, s.readFailed(fmt.Errorf("raftstore: entries [%d,%d) (log %d..%d): %w", lo, hi, trunc.index+1, last, err))
	}
	if uint64(len(out)) < diskHi-lo {
		return out, nil // maxSize reached
	}
	for _, e := range cached {
		size += entrySize(e)
		if size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// readEntries decodes [lo, hi) from it, stopping before maxSize is
// exceeded (but returning at least one entry). It reports a missing index
// as corruption: the view says the log has no gaps.
func readEntries(it *pebble.Iterator, lo, hi, maxSize uint64) ([]*raftpb.Entry, uint64, error) {
	capHint := min(hi-lo, 1024)
	out := make([]*raftpb.Entry, 0, capHint)
	slab := newEntrySlab(int(capHint))
	var data []byte
	var size uint64
	next := lo
	for valid := it.First(); valid; valid = it.Next() {
		idx, err := decodeIndexKey(logPrefix, it.Key())
		if err != nil {
			return nil, 0, err
		}
		if idx != next {
			return nil, 0, fmt.Errorf("%w: entry %d missing (found %d)", ErrCorrupt, next, idx)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, err
		}
		if len(slab.ents) == cap(slab.ents) {
			slab = newEntrySlab(int(min(hi-next, 4096)))
		}
		e, err := decodeEntryInto(slab, &data, idx, v)
		if err != nil {
			return nil, 0, err
		}
		size += entrySize(e)
		if len(out) > 0 && size > maxSize {
			return out, size, nil
		}
		out = append(out, e)
		next++
	}
	if err := it.Error(); err != nil {
		return nil, 0, err
	}
	if next != hi {
		return nil, 0, fmt.Errorf("%w: entry %d missing (log should reach %d)", ErrCorrupt, next, hi-1)
	}
	return out, size, nil
}

// limitSize returns the longest prefix of ents within maxSize, at least one.
func limitSize(ents []*raftpb.Entry, maxSize uint64) []*raftpb.Entry {
	if maxSize == math.MaxUint64 || len(ents) == 0 {
		return ents
	}
	size := entrySize(ents[0])
	for n := 1; n < len(ents); n++ {
		size += entrySize(ents[n])
		if size > maxSize {
			return ents[:n]
		}
	}
	return ents
}

// readFailed halts the store on a read of the log that failed (the disk
// returned an error, or the entry does not decode) and returns err. Raft
// has no answer for such a read but to panic (raftLog.term and slice
// panic on any error but ErrCompacted); the halt lets the journal tell
// that panic, which it recovers, from a bug.
func (s *Store) readFailed(err error) error {
	s.halt.record(&IOError{Op: "read", Path: s.dir, Err: err})
	return err
}

package raftstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

// Inspection is a read-only view of a store for offline tools: Pebble is
// opened with ReadOnly (nothing is written, flushed or compacted; the WAL
// is replayed into memory only), and the metadata is decoded without the
// restart invariants Open enforces, so that a broken store can still be
// examined; Problems lists what Open would refuse. It is not safe for
// concurrent use.
type Inspection struct {
	db *pebble.DB

	// Format is the m/fmt value (nil: none).
	Format []byte
	// HardState, Snapshot and Trunc are the stored metadata (zero values
	// when absent).
	HardState *raftpb.HardState
	Snapshot  *raftpb.Snapshot
	// TruncIndex and TruncTerm are the (index, term) of FirstIndex()-1.
	TruncIndex, TruncTerm uint64
	// First and Last are the first and last stored entry indexes (both 0
	// when the log holds no entry).
	First, Last uint64

	metaErrs []error // metadata records that did not decode
}

// Inspect opens the store in dir read-only. A dir without a store is an
// error naming it.
func Inspect(fs vfs.FS, dir string) (*Inspection, error) {
	if fs == nil {
		fs = vfs.Default
	}
	popts := pebbleOptions(Options{FS: fs, Dir: dir, Logger: slog.New(slog.DiscardHandler)}, newHalt())
	popts.ReadOnly = true
	popts.ErrorIfNotExists = true
	db, err := pebble.Open(dir, popts)
	popts.Cache.Unref()
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s read-only: %w", dir, err)
	}
	in := &Inspection{db: db, HardState: &raftpb.HardState{}, Snapshot: &raftpb.Snapshot{}}
	s := &Store{db: db, halt: newHalt()}
	if in.Format, err = s.get(keyFormat); err != nil {
		db.Close()
		return nil, fmt.Errorf("raftstore: %s: %w", dir, err)
	}
	if in.Format != nil {
		if err := decodeFormat(in.Format); err != nil {
			in.metaErrs = append(in.metaErrs, err)
		}
	}
	if v, err := s.get(keyHardState); err != nil {
		in.metaErrs = append(in.metaErrs, err)
	} else if v != nil {
		if hs, err := decodeHardState(v); err != nil {
			in.metaErrs = append(in.metaErrs, err)
		} else {
			in.HardState = hs
		}
	}
	if v, err := s.get(keySnapshot); err != nil {
		in.metaErrs = append(in.metaErrs, err)
	} else if v != nil {
		if snap, err := decodeSnapshot(v); err != nil {
			in.metaErrs = append(in.metaErrs, err)
		} else {
			in.Snapshot = snap
		}
	}
	if v, err := s.get(keyTrunc); err != nil {
		in.metaErrs = append(in.metaErrs, err)
	} else if v != nil {
		if t, err := decodeTrunc(v); err != nil {
			in.metaErrs = append(in.metaErrs, err)
		} else {
			in.TruncIndex, in.TruncTerm = t.index, t.term
		}
	}
	first, last, ok, err := s.logBounds()
	if err != nil {
		in.metaErrs = append(in.metaErrs, fmt.Errorf("log bounds: %w", err))
	} else if ok {
		in.First, in.Last = first, last
	}
	return in, nil
}

// Close closes the store.
func (in *Inspection) Close() error {
	if err := in.db.Close(); err != nil {
		return fmt.Errorf("raftstore: close: %w", err)
	}
	return nil
}

// LastIndex is the raft last index: the last entry, or the truncation
// index when the log holds none.
func (in *Inspection) LastIndex() uint64 {
	if in.Last == 0 {
		return in.TruncIndex
	}
	return in.Last
}

// Scan calls fn for every stored entry with an index in [lo, hi], in
// order. A value that does not decode is passed as err (wrapping
// ErrCorrupt) with a nil entry, and the scan goes on; a gap is not
// reported here (the caller sees the indexes jump). The entry's data is
// fn's to keep.
func (in *Inspection) Scan(lo, hi uint64, fn func(index uint64, e *raftpb.Entry, err error) error) error {
	if hi < lo {
		return nil
	}
	upper := logEnd
	if hi < ^uint64(0) {
		upper = entryKey(hi + 1)
	}
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(lo), UpperBound: upper})
	if err != nil {
		return fmt.Errorf("raftstore: scan: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		idx, err := decodeIndexKey(logPrefix, it.Key())
		if err != nil {
			if err := fn(0, nil, err); err != nil {
				return err
			}
			continue
		}
		e, err := decodeEntry(idx, it.Value())
		if err := fn(idx, e, err); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("raftstore: scan: %w", err)
	}
	return nil
}

// MembershipAt returns the newest membership blob saved at or before
// index, or ErrNoMembership.
func (in *Inspection) MembershipAt(index uint64) ([]byte, error) {
	s := &Store{db: in.db}
	key, ok, err := s.membershipKeyAt(index)
	if err != nil {
		return nil, fmt.Errorf("raftstore: membership at %d: %w", index, err)
	}
	if !ok {
		return nil, fmt.Errorf("raftstore: membership at %d: %w", index, ErrNoMembership)
	}
	return s.get(key)
}

// Problems checks what Open checks (the metadata decodes; trunc <= snapshot
// <= HardState.Commit <= last index; the log starts right after trunc) and
// what Open leaves to reads: the log is contiguous from its first entry to
// its last, each entry decodes, and terms never decrease. Each problem
// wraps ErrCorrupt.
func (in *Inspection) Problems() []error {
	var out []error
	for _, err := range in.metaErrs {
		out = append(out, mark(err))
	}
	empty := in.First == 0 && in.Last == 0
	if in.Format == nil && !(empty && in.HardState.GetCommit() == 0) {
		out = append(out, fmt.Errorf("%w: keys present but no m/fmt (not a raftstore?)", ErrCorrupt))
	}
	snapIndex := in.Snapshot.GetMetadata().GetIndex()
	last := in.LastIndex()
	commit := in.HardState.GetCommit()
	if !empty && in.First != in.TruncIndex+1 {
		out = append(out, fmt.Errorf("%w: the log starts at %d but the truncation point is %d: entries [%d, %d] are missing",
			ErrCorrupt, in.First, in.TruncIndex, in.TruncIndex+1, in.First-1))
	}
	if in.TruncIndex > snapIndex {
		out = append(out, fmt.Errorf("%w: truncation index %d is past the snapshot index %d", ErrCorrupt, in.TruncIndex, snapIndex))
	}
	if snapIndex > commit {
		out = append(out, fmt.Errorf("%w: snapshot index %d is past the durable commit %d", ErrCorrupt, snapIndex, commit))
	}
	if commit > last {
		out = append(out, fmt.Errorf("%w: HardState commit %d is past the last entry %d", ErrCorrupt, commit, last))
	}
	if snapIndex == in.TruncIndex && snapIndex != 0 && in.Snapshot.GetMetadata().GetTerm() != in.TruncTerm {
		out = append(out, fmt.Errorf("%w: snapshot term %d at index %d differs from the truncation term %d",
			ErrCorrupt, in.Snapshot.GetMetadata().GetTerm(), snapIndex, in.TruncTerm))
	}
	if empty {
		return out
	}
	next, prevTerm := in.First, in.TruncTerm
	const maxListed = 20
	listed := 0
	add := func(err error) {
		if listed < maxListed {
			out = append(out, err)
		}
		listed++
	}
	err := in.Scan(in.First, in.Last, func(index uint64, e *raftpb.Entry, err error) error {
		if err != nil {
			add(mark(err))
			if index == 0 {
				return nil
			}
		}
		if index > next {
			add(fmt.Errorf("%w: entries [%d, %d] are missing from the log", ErrCorrupt, next, index-1))
		}
		next = index + 1
		if e != nil {
			if e.GetTerm() < prevTerm {
				add(fmt.Errorf("%w: entry %d has term %d, below the term %d before it", ErrCorrupt, index, e.GetTerm(), prevTerm))
			}
			prevTerm = e.GetTerm()
		}
		return nil
	})
	if err != nil {
		out = append(out, mark(err))
	}
	if listed > maxListed {
		out = append(out, fmt.Errorf("%w: %d more problems in the log not listed", ErrCorrupt, listed-maxListed))
	}
	return out
}

// mark makes err wrap ErrCorrupt if it does not already.
func mark(err error) error {
	if errors.Is(err, ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

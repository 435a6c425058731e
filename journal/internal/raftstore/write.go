package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Append persists one Ready's worth of state in ONE Pebble batch, in this
// order:
//
//  1. if snap is non-empty: its metadata, the deletion of the whole older
//     log and the truncation record (index, term) = the snapshot's;
//  2. ents, deleting every stored entry after the last of them (a
//     conflicting suffix raft has overwritten); entries at or below the
//     truncation index are skipped;
//  3. hs, if non-empty.
//
// The batch is committed with fsync when sync is true or snap is non-empty
// (pass raft's Ready.MustSync). The view raft reads gains the batch only
// after its commit (and fsync) has returned; no lock readers take is held
// across that fsync, except for a snapshot or an overwrite at or below the
// durable commit. A synced overwrite of an uncommitted tail hides that
// tail from the view while its fsync runs. Append refuses, with an error and without writing,
// entries that would leave a gap, a snapshot older than the current one,
// and a HardState whose Commit is past the last entry.
//
// The entries are kept in the cache and shared with raft: neither side may
// mutate them afterwards.
func (s *Store) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, sync bool) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	s.mu.RLock()
	closed, trunc, last, curSnap := s.mu.closed, s.mu.trunc, s.mu.last, s.mu.snap
	curCommit := s.mu.hs.GetCommit()
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := s.halt.check(); err != nil {
		return err
	}

	b := s.db.NewBatchWithSize(appendBatchSize(ents))
	defer b.Close()
	deletes := false // the batch removes entries readers may be looking at
	oldLast := last

	hasSnap := !raft.IsEmptySnap(snap)
	if hasSnap {
		md := snap.GetMetadata()
		if md.GetIndex() <= curSnap.GetMetadata().GetIndex() {
			return fmt.Errorf("raftstore: append: snapshot %d is not newer than the current snapshot %d",
				md.GetIndex(), curSnap.GetMetadata().GetIndex())
		}
		v, err := proto.Marshal(snap)
		if err != nil {
			return fmt.Errorf("raftstore: append: encode snapshot: %w", err)
		}
		trunc = truncState{index: md.GetIndex(), term: md.GetTerm()}
		last = trunc.index
		if err := b.DeleteRange(logPrefix, logEnd, nil); err != nil {
			return err
		}
		if err := b.Set(keySnapshot, v, nil); err != nil {
			return err
		}
		if err := b.Set(keyTrunc, encodeTrunc(trunc), nil); err != nil {
			return err
		}
		deletes = true
	}

	// Skip entries already covered by the snapshot or a compaction.
	for len(ents) > 0 && ents[0].GetIndex() <= trunc.index {
		ents = ents[1:]
	}
	if len(ents) > 0 {
		first := ents[0].GetIndex()
		if first > last+1 {
			return fmt.Errorf("raftstore: append: entry %d would leave a gap after the last entry %d", first, last)
		}
		// Batch.Set copies key and value: one buffer each serves all.
		var buf []byte
		key := entryKey(0)
		for i, e := range ents {
			if e.GetIndex() != first+uint64(i) {
				return fmt.Errorf("raftstore: append: entries not contiguous: %d follows %d", e.GetIndex(), first+uint64(i)-1)
			}
			buf = appendEntryValue(buf[:0], e)
			binary.BigEndian.PutUint64(key[len(logPrefix):], e.GetIndex())
			if err := b.Set(key, buf, nil); err != nil {
				return err
			}
		}
		newLast := ents[len(ents)-1].GetIndex()
		if newLast < last {
			if err := b.DeleteRange(entryKey(newLast+1), entryKey(last+1), nil); err != nil {
				return err
			}
			deletes = true
		}
		last = newLast
	}

	hasHS := !raft.IsEmptyHardState(hs)
	commit := curCommit
	if hasHS {
		commit = hs.GetCommit()
	}
	if hasSnap && commit < trunc.index {
		// Restart would find the snapshot past the durable commit (etcd#10219).
		return fmt.Errorf("raftstore: append: commit %d would be behind the snapshot %d", commit, trunc.index)
	}
	if hasHS {
		if hs.GetCommit() > last {
			return fmt.Errorf("raftstore: append: HardState commit %d is past the last entry %d", hs.GetCommit(), last)
		}
		v, err := proto.Marshal(hs)
		if err != nil {
			return fmt.Errorf("raftstore: append: encode HardState: %w", err)
		}
		if err := b.Set(keyHardState, v, nil); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}

	publish := func() {
		if hasSnap {
			s.mu.snap = proto.Clone(snap).(*raftpb.Snapshot)
			s.mu.trunc = trunc
			s.mu.cache.reset(trunc.index + 1)
		}
		s.mu.cache.append(ents)
		s.mu.last = last
		if hasHS {
			s.mu.hs = proto.Clone(hs).(*raftpb.HardState)
		}
	}
	sync = sync || hasSnap
	// hide: a synced batch that overwrites or deletes an uncommitted tail.
	hide := !hasSnap && sync && len(ents) > 0 &&
		ents[0].GetIndex() <= oldLast && ents[0].GetIndex() > curCommit
	if deletes && !hide {
		// Hold readers off while entries they could see disappear. A
		// snapshot removes the whole log, committed entries included, and
		// an overwrite at or below the durable commit has no view to show
		// meanwhile that is both consistent and durable; an unsynced batch
		// holds the lock for no fsync.
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.commit(b, sync); err != nil {
			return fmt.Errorf("raftstore: append: commit: %w", err)
		}
		publish()
		return nil
	}
	if hide {
		// A synced overwrite of an uncommitted tail. The batch is applied
		// under the write lock, without waiting for its fsync, and the
		// view stops before the first entry it overwrites or deletes:
		// Pebble no longer holds them, and their replacements are not
		// durable yet. Raft's reads (the raft loop's) and the readers of
		// committed entries go on during the fsync; raft keeps the
		// replacements in its unstable log until this Append returns, so
		// it reads nothing from the hidden tail. The full view is
		// published once the fsync returns.
		if err := s.commitNoSyncWait(b, ents[0].GetIndex()); err != nil {
			return fmt.Errorf("raftstore: append: commit: %w", err)
		}
	} else if err := s.commit(b, sync); err != nil {
		return fmt.Errorf("raftstore: append: commit: %w", err)
	}
	s.mu.Lock()
	publish()
	s.mu.Unlock()
	return nil
}

// entryRecordBytes bounds what a batch record of one entry takes beside
// its data: the record's kind, the key and its length, the value's length,
// and the value's header (appendEntryValue: version, flags, term, type).
const entryRecordBytes = 1 + 1 + 10 + binary.MaxVarintLen32 + 2 + binary.MaxVarintLen64 + 2

// appendBatchSize is the batch Append fills with ents and a HardState, so
// that the batch is allocated once at its size instead of doubling from a
// small buffer, each step copying what it held (a pooled batch keeps its
// buffer, and Pebble reuses one big enough).
func appendBatchSize(ents []*raftpb.Entry) int {
	n := 128 // the batch's header, a HardState, the truncation record
	for _, e := range ents {
		n += len(e.Data) + entryRecordBytes
	}
	return n
}

// commitNoSyncWait commits b, a synced batch that overwrites the log from
// index hideFrom on, with the view hidden from hideFrom while its fsync
// runs: it applies b under s.mu, cuts the view (last and the cache) to
// hideFrom-1, and waits for the fsync outside s.mu. The caller publishes
// the full view.
func (s *Store) commitNoSyncWait(b *pebble.Batch, hideFrom uint64) error {
	s.mu.Lock()
	if err := s.halt.check(); err != nil {
		s.mu.Unlock()
		return err
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		s.mu.Unlock()
		return s.halted(err)
	}
	s.mu.last = min(s.mu.last, hideFrom-1)
	s.mu.cache.truncateBack(hideFrom)
	s.mu.Unlock()
	if err := b.SyncWait(); err != nil {
		return s.halted(err)
	}
	// As in commit: a failed WAL write or fsync halts the store, whatever
	// SyncWait returns.
	if err := s.halt.check(); err != nil {
		return err
	}
	s.syncs.Add(1)
	return nil
}

// SetSnapshot records a locally written, already durable image as raft's
// snapshot (synced). Its index must be newer than the current snapshot, at
// most the durable HardState.Commit (an image of uncommitted state would
// break the restart invariant, etcd#10219), and its term must match the
// log's term at that index while the log still holds it. Entries are not
// removed: call Compact for that.
func (s *Store) SetSnapshot(snap *raftpb.Snapshot) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	s.mu.RLock()
	closed, hs, cur := s.mu.closed, s.mu.hs, s.mu.snap
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := s.halt.check(); err != nil {
		return err
	}
	md := snap.GetMetadata()
	idx := md.GetIndex()
	switch {
	case raft.IsEmptySnap(snap):
		return errors.New("raftstore: set snapshot: empty snapshot (index 0)")
	case idx == cur.GetMetadata().GetIndex() && proto.Equal(snap, cur):
		return nil // already recorded
	case idx <= cur.GetMetadata().GetIndex():
		return fmt.Errorf("raftstore: set snapshot %d: %w (current %d)", idx, raft.ErrSnapOutOfDate, cur.GetMetadata().GetIndex())
	case idx > hs.GetCommit():
		return fmt.Errorf("raftstore: set snapshot %d: past the durable commit %d", idx, hs.GetCommit())
	}
	term, err := s.Term(idx)
	if err != nil {
		return fmt.Errorf("raftstore: set snapshot %d: term: %w", idx, err)
	}
	if term != md.GetTerm() {
		return fmt.Errorf("raftstore: set snapshot %d: term %d, but the log has term %d there", idx, md.GetTerm(), term)
	}
	v, err := proto.Marshal(snap)
	if err != nil {
		return fmt.Errorf("raftstore: set snapshot %d: encode: %w", idx, err)
	}
	if err := s.set(keySnapshot, v, pebble.Sync); err != nil {
		return fmt.Errorf("raftstore: set snapshot %d: %w", idx, err)
	}
	s.syncs.Add(1)
	s.mu.Lock()
	s.mu.snap = proto.Clone(snap).(*raftpb.Snapshot)
	s.mu.Unlock()
	return nil
}

// Compact drops the entries up to and including index with one range
// deletion and records (index, Term(index)) as the truncation point. index
// must not be past the snapshot index (the image must cover what is
// dropped). Compacting at or below the current truncation returns
// raft.ErrCompacted. Membership records older than the newest one at or
// before index are pruned too.
func (s *Store) Compact(index uint64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	s.mu.RLock()
	closed, trunc, snap := s.mu.closed, s.mu.trunc, s.mu.snap
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := s.halt.check(); err != nil {
		return err
	}
	if index <= trunc.index {
		return raft.ErrCompacted
	}
	if si := snap.GetMetadata().GetIndex(); index > si {
		return fmt.Errorf("raftstore: compact %d: past the snapshot index %d", index, si)
	}
	term, err := s.Term(index)
	if err != nil {
		return fmt.Errorf("raftstore: compact %d: term: %w", index, err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(entryKey(trunc.index+1), entryKey(index+1), nil); err != nil {
		return err
	}
	newTrunc := truncState{index: index, term: term}
	if err := b.Set(keyTrunc, encodeTrunc(newTrunc), nil); err != nil {
		return err
	}
	if keep, ok, err := s.membershipKeyAt(index); err != nil {
		return fmt.Errorf("raftstore: compact %d: %w", index, err)
	} else if ok {
		if err := b.DeleteRange(confPrefix, keep, nil); err != nil {
			return err
		}
	}
	// Readers see the log as compacted before the batch deletes a byte:
	// a read that began earlier holds s.mu.RLock and finishes first, and
	// no later one reads below the new truncation point. The commit then
	// runs outside s.mu, so that raft's reads (the raft loop's) never wait
	// for its fsync: on a slow disk that wait would stall the loop, its
	// ticks and heartbeats, for an fsync. Should the commit fail, the
	// store halts (s.commit), and a restart finds the old truncation
	// point with every entry it names.
	s.mu.Lock()
	s.mu.trunc = newTrunc
	s.mu.cache.truncateFront(index)
	s.mu.Unlock()
	// Synced so that a crash cannot resurrect the old truncation point with
	// some of its entries gone; compactions are rare.
	if err := s.commit(b, true); err != nil {
		return fmt.Errorf("raftstore: compact %d: commit: %w", index, err)
	}
	return nil
}

// SaveMembership stores the membership blob (opaque: ConfState plus peer
// addresses) as of index. It is not synced: the journal saves it when it
// applies the conf change at index, and after a crash raft replays that
// entry again; a later synced commit makes it durable anyway.
//
// It does not take writeMu: it writes one key no other writer's batch
// depends on, so the applier that calls it never waits for an Append's
// fsync. A Compact that runs beside it prunes only records older than the
// one it keeps, which a concurrent save at a newer index is not.
func (s *Store) SaveMembership(index uint64, blob []byte) error {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	s.readers.Add(1) // Close waits for the write before closing db
	s.mu.RUnlock()
	defer s.readers.Done()
	if err := s.halt.check(); err != nil {
		return err
	}
	if err := s.set(confKey(index), blob, pebble.NoSync); err != nil {
		return fmt.Errorf("raftstore: save membership at %d: %w", index, err)
	}
	return nil
}

// MembershipAt returns the newest membership blob saved at or before index,
// or ErrNoMembership.
func (s *Store) MembershipAt(index uint64) ([]byte, error) {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	s.readers.Add(1)
	s.mu.RUnlock()
	defer s.readers.Done()

	key, ok, err := s.membershipKeyAt(index)
	if err != nil {
		return nil, fmt.Errorf("raftstore: membership at %d: %w", index, err)
	}
	if !ok {
		return nil, fmt.Errorf("raftstore: membership at %d: %w", index, ErrNoMembership)
	}
	v, err := s.get(key)
	if err != nil {
		return nil, fmt.Errorf("raftstore: membership at %d: %w", index, err)
	}
	return v, nil
}

// membershipKeyAt finds the key of the newest membership at or before index.
func (s *Store) membershipKeyAt(index uint64) ([]byte, bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: confPrefix, UpperBound: confEnd})
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	if !it.SeekLT(confKey(index + 1)) {
		if index == ^uint64(0) && it.Last() { // confKey(index+1) wrapped
			return append([]byte{}, it.Key()...), true, nil
		}
		return nil, false, it.Error()
	}
	if _, err := decodeIndexKey(confPrefix, it.Key()); err != nil {
		return nil, false, err
	}
	return append([]byte{}, it.Key()...), true, nil
}

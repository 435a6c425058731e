package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// scanEntries calls fn for every normal, non-empty entry in (after, upTo]
// of the local log, with its decoded envelope. Malformed entries are
// skipped (as the applier skips them).
func (j *Journal) scanEntries(after, upTo uint64, fn func(index uint64, env envelope.Envelope) error) error {
	const chunk = 4 << 20
	for lo := after + 1; lo <= upTo; {
		ents, err := j.store.Entries(lo, upTo+1, chunk)
		if err != nil {
			if errors.Is(err, raft.ErrCompacted) {
				return fmt.Errorf("%w: entries from %d: %w", ErrCompacted, lo, err)
			}
			return operr.Errorf("journal: read entries [%d, %d]: %w", lo, upTo, err)
		}
		if len(ents) == 0 {
			return fmt.Errorf("journal: read entries [%d, %d]: none returned", lo, upTo)
		}
		for _, e := range ents {
			if e.GetType() != raftpb.EntryNormal || len(e.GetData()) == 0 {
				continue
			}
			env, err := envelope.Decode(e.GetData())
			if errors.Is(err, ErrUnknownVersion) {
				// Never skipped: a replay past it would not be what the
				// replicas that read it hold.
				return &HaltError{Index: e.GetIndex(), What: "entry", Version: int(e.GetData()[0]), Err: err}
			}
			if err != nil {
				continue // skipped by every replica alike
			}
			if err := fn(e.GetIndex(), env); err != nil {
				return err
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

// ReadEntries calls fn for every user entry in (after, upTo], in order, with
// the same data (and the same duplicate skipping) the StateMachine saw. upTo
// must not exceed the applied index. It is what an image checkpointer uses
// to replay the log into a shadow state; fn must not retain data. An entry
// of a kind this code does not read ends it with a *HaltError: a replay
// never skips what the live applier would have halted on.
func (j *Journal) ReadEntries(ctx context.Context, after, upTo uint64, fn func(index uint64, data []byte) error) error {
	if upTo > j.applied.Load() {
		return fmt.Errorf("journal: read entries up to %d: beyond the applied index %d", upTo, j.applied.Load())
	}
	if upTo <= after {
		return nil
	}
	// The dedupe decisions at the entries need the window before `after`.
	d, err := j.dedupeAt(after)
	if err != nil {
		return operr.Errorf("journal: read entries: %w", err)
	}
	return j.scanEntries(after, upTo, func(index uint64, env envelope.Envelope) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if env.Kind != envelope.KindUser {
			return nil
		}
		prev, verdict := d.Judge(index, env)
		if verdict == dedupe.Expired {
			return nil
		}
		d.Record(index, env.Key, prev, verdict, nil)
		if verdict == dedupe.Duplicate {
			return nil
		}
		return fn(index, env.Data)
	})
}

// membershipBlobAt returns the opaque membership blob as of index (ConfState,
// member addresses and roles, and the idempotency keys of the dedupe window
// ending at index). The image package stores it in the image header and
// hands it back through Snapshots.LoadLatest and ImageWritten.
func (j *Journal) membershipBlobAt(index uint64) ([]byte, error) {
	blob, err := j.store.MembershipAt(index)
	if err != nil && !errors.Is(err, raftstore.ErrNoMembership) {
		return nil, operr.Errorf("journal: membership at %d: %w", index, err)
	}
	m := membership.New()
	if len(blob) > 0 {
		if m, err = membership.Decode(blob); err != nil {
			return nil, operr.Errorf("journal: membership at %d: %w", index, err)
		}
	}
	m.Index = index
	d, err := j.dedupeAt(index)
	if err != nil {
		return nil, operr.Errorf("journal: membership at %d: %w", index, err)
	}
	m.Keys = append([]dedupe.Key(nil), d.Live()...)
	return m.Encode(), nil
}

// TermAt returns the raft term of the entry at index.
func (j *Journal) TermAt(index uint64) (uint64, error) {
	t, err := j.store.Term(index)
	if err != nil {
		if errors.Is(err, raft.ErrCompacted) {
			return 0, operr.Errorf("journal: term at %d: %w", index, ErrCompacted)
		}
		return 0, operr.Errorf("journal: term at %d: %w", index, err)
	}
	return t, nil
}

// imageWritten tells the journal that a durable image of the state at
// index (term, membership from MembershipAt) exists locally. It becomes
// raft's snapshot (synced), so a follower that needs compacted entries is
// sent that image, and the log is compacted up to the newest image this
// journal recorded at or below index - Config.CompactMargin (or the
// cluster's dedupe window when it is wider), unless a snapshot is being sent to a follower (then compaction waits for the next
// image). The log so always starts right after an image (or at index 1):
// every index it still holds can be rebuilt from that image and the
// entries after it, as a resumed watch does, and the caller keeps that
// image (FirstIndex tells which).
func (j *Journal) imageWritten(ctx context.Context, index, term uint64, blob []byte) error {
	m, err := membership.Decode(blob)
	if err != nil {
		return operr.Errorf("journal: image %d: %w", index, err)
	}
	if index > j.applied.Load() {
		return fmt.Errorf("journal: image %d is beyond the applied index %d", index, j.applied.Load())
	}
	// With asynchronous storage writes an entry can be applied (it is
	// durable and committed) before the HardState carrying its commit is
	// written. Raft's snapshot must not pass the durable commit (a restart
	// would find commit < snapshot, etcd#10219): wait for that write.
	if err := j.waitDurableCommit(ctx, index); err != nil {
		return operr.Errorf("journal: image %d: %w", index, err)
	}
	snap := raftpb.EnsureSnapshot(&raftpb.Snapshot{
		Data: blob,
		Metadata: &raftpb.SnapshotMetadata{
			Index: new(index), Term: new(term), ConfState: m.ConfState(),
		},
	})
	// The store work runs on the append goroutine, in order with raft's
	// appends: the raft loop never waits for this fsync.
	done := make(chan error, 1)
	j.appendq.push(appendItem{op: func() { done <- j.recordImage(snap) }})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return operr.Errorf("journal: image %d: %w", index, context.Cause(ctx))
	case <-j.done:
		return ErrClosed
	case <-j.loopDead:
		return j.loopErr()
	}
}

// recordImage makes snap raft's snapshot (synced) and compacts the log up
// to the newest image recorded at or below its index - compactMargin,
// unless a snapshot is being sent to a follower. It
// runs on the append goroutine.
func (j *Journal) recordImage(snap *raftpb.Snapshot) error {
	index := snap.GetMetadata().GetIndex()
	// The image's membership record, its dedupe window included, at the
	// image's index: once the log is compacted up to this image, a replay
	// from it (dedupeAt) takes the compacted part of the window from there.
	// Unsynced: SetSnapshot's synced write right after it carries it to
	// disk (one Pebble WAL, in order), before any compaction to the image.
	if err := j.store.SaveMembership(index, snap.GetData()); err != nil {
		return operr.Errorf("journal: record image %d: %w", index, err)
	}
	if err := j.store.SetSnapshot(snap); err != nil {
		return operr.Errorf("journal: record image %d: %w", index, err)
	}
	j.lastImage.Store(index)
	j.images.add(index)
	if j.snapsOut.Load() > 0 {
		j.log.Info("compaction postponed: snapshot in flight", "image", index)
		return nil
	}
	margin := j.compactMargin()
	if index <= margin {
		return nil
	}
	cut := j.images.atOrBelow(index - margin)
	if first, err := j.store.FirstIndex(); err == nil && cut >= first {
		if err := j.store.Compact(cut); err != nil {
			return operr.Errorf("journal: compact to %d: %w", cut, err)
		}
		j.images.dropBelow(cut)
	}
	return nil
}

// recordWindow writes the membership record at index, the image Open
// loaded (im decoded from blob, the image's membership), unless the store
// holds that very record: a compaction up to the image then leaves the
// dedupe window a replay from it needs (dedupeAt), also in a data dir
// whose images were recorded before recordImage wrote the record. Unsynced,
// as recordImage's: a synced write carries it to disk before any
// compaction.
func (j *Journal) recordWindow(index uint64, im *membership.Membership, blob []byte) error {
	if im.Index != index {
		return nil // not the blob MembershipAt gave for this image
	}
	cur, err := j.store.MembershipAt(index)
	if err != nil && !errors.Is(err, raftstore.ErrNoMembership) {
		return err
	}
	if bytes.Equal(cur, blob) {
		return nil
	}
	return j.store.SaveMembership(index, blob)
}

// FirstIndex returns the first index the log still holds: entries after
// FirstIndex()-1 can be read (ReadEntries, TermAt), and the log starts
// right after an image at that index (or at 1), which the image store must
// keep for the log to be replayable from it.
func (j *Journal) FirstIndex() (uint64, error) {
	first, err := j.store.FirstIndex()
	if err != nil {
		return 0, operr.Errorf("journal: first index: %w", err)
	}
	return first, nil
}

// imageIndexes is the indexes of the images this journal recorded (or
// started from) that the log may still be compacted to, ascending.
type imageIndexes struct {
	mu  sync.Mutex
	idx []uint64
}

func (m *imageIndexes) add(index uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.idx); n == 0 || m.idx[n-1] < index {
		m.idx = append(m.idx, index)
	}
}

// reset forgets every image but index (an image installed from the leader:
// the log starts after it).
func (m *imageIndexes) reset(index uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.idx = append(m.idx[:0], index)
}

// atOrBelow returns the newest image at or below index, 0 if none.
func (m *imageIndexes) atOrBelow(index uint64) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, found := slices.BinarySearch(m.idx, index)
	if found {
		return m.idx[i]
	}
	if i == 0 {
		return 0
	}
	return m.idx[i-1]
}

// dropBelow forgets the images older than index (the log starts after it).
func (m *imageIndexes) dropBelow(index uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, _ := slices.BinarySearch(m.idx, index)
	m.idx = slices.Delete(m.idx, 0, i)
}

// waitDurableCommit waits until the durable commit index reaches index.
func (j *Journal) waitDurableCommit(ctx context.Context, index uint64) error {
	for {
		j.mu.Lock()
		ch := j.mu.commitCh
		j.mu.Unlock()
		if j.committed.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the commit index %d to be durable: %w", index, ctx.Err())
		case <-j.done:
			return ErrClosed
		case <-j.loopDead:
			return j.loopErr()
		}
	}
}

// dedupeAt rebuilds the dedupe window ending at index, as the applier
// held it there: it starts from a window recorded with an image, that of
// the newest image this journal knows at or below index (the membership
// record recordImage writes, that Open writes for the image it loaded,
// that a snapshot from the leader or a seed writes for theirs) or else
// that of the image the log starts after (FirstIndex()-1), or from an
// empty one when the log starts at 1, and replays every entry of the log
// after it up to index through judge, as the applier did. Whether a copy
// is recorded depends on the key's copy before it (a copy past its since's
// window is recorded as a duplicate when an earlier copy lies within the
// window, and not at all otherwise), which can lie before the window: a
// replay of the window's entries alone would decide otherwise than the
// applier did. Without a recorded window the decisions after the log's
// start are unknown, and dedupeAt fails with ErrCompacted rather than
// rebuild a window that would decide otherwise.
func (j *Journal) dedupeAt(index uint64) (*dedupe.Window, error) {
	d := dedupe.New(j.dedupeWindow())
	first, err := j.store.FirstIndex()
	if err != nil {
		return nil, err
	}
	if first > 1 && index < first-1 {
		return nil, fmt.Errorf("%w: the dedupe window ending at %d lies before the log's start %d", ErrCompacted, index, first)
	}
	from := first - 1 // the index of the recorded window the replay starts after
	if img := j.images.atOrBelow(index); img > from {
		if keys, err := j.windowAt(img); err == nil {
			d.Reset(keys)
			from = img
		}
	}
	if from == first-1 && from > 0 {
		keys, err := j.windowAt(from)
		if err != nil {
			return nil, err
		}
		d.Reset(keys)
	}
	if from < index {
		if err := j.scanEntries(from, index, func(i uint64, env envelope.Envelope) error {
			if env.Kind != envelope.KindUser {
				return nil
			}
			if prev, verdict := d.Judge(i, env); verdict != dedupe.Expired {
				d.Record(i, env.Key, prev, verdict, nil)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	d.Evict(index)
	return d, nil
}

// windowAt returns the dedupe window recorded as of index, the index of an
// image the log starts after: from the membership record at index, or
// from raft's snapshot when it is that image. Either is the blob
// MembershipAt gave the image.
func (j *Journal) windowAt(index uint64) ([]dedupe.Key, error) {
	blob, err := j.store.MembershipAt(index)
	if err != nil && !errors.Is(err, raftstore.ErrNoMembership) {
		return nil, err
	}
	if len(blob) > 0 {
		m, err := membership.Decode(blob)
		if err != nil {
			return nil, fmt.Errorf("membership at %d: %w", index, err)
		}
		if m.Index == index {
			return m.Keys, nil
		}
	}
	if snap, err := j.store.Snapshot(); err == nil && snap.GetMetadata().GetIndex() == index && len(snap.GetData()) > 0 {
		m, err := membership.Decode(snap.GetData())
		if err != nil {
			return nil, fmt.Errorf("snapshot membership at %d: %w", index, err)
		}
		return m.Keys, nil
	}
	return nil, fmt.Errorf("%w: the log starts after %d, and no dedupe window is recorded there", ErrCompacted, index)
}

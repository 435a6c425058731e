package journal

import "context"

// ImageLog is the journal as an image checkpointer uses it: the log to
// replay into a shadow state, the membership to store with an image, and
// the call that records a durable image as raft's snapshot and compacts
// the log behind it. Get it with [ImageLogOf] and hand it to the image
// package (image.CheckpointerConfig.Journal, which it satisfies); a host
// reads the log with [Journal.FirstIndex], [Journal.ReadEntries] and
// [Journal.TermAt] and needs nothing else here. It is safe for concurrent use.
type ImageLog struct{ j *Journal }

// ImageLogOf returns the image checkpointer's view of j.
func ImageLogOf(j *Journal) *ImageLog { return &ImageLog{j: j} }

// ReadEntries is [Journal.ReadEntries].
func (l *ImageLog) ReadEntries(ctx context.Context, after, upTo uint64, fn func(index uint64, data []byte) error) error {
	return l.j.ReadEntries(ctx, after, upTo, fn)
}

// TermAt is [Journal.TermAt].
func (l *ImageLog) TermAt(index uint64) (uint64, error) { return l.j.TermAt(index) }

// MembershipAt returns the opaque membership blob as of index (ConfState,
// member addresses and roles, and the idempotency keys of the dedupe
// window ending at index). The image package stores it in the image
// header and hands it back through Snapshots.LoadLatest and ImageWritten.
func (l *ImageLog) MembershipAt(index uint64) ([]byte, error) { return l.j.membershipBlobAt(index) }

// ImageWritten tells the journal that a durable image of the state at
// index (term, membership from MembershipAt) exists locally. It becomes
// raft's snapshot (synced), so a follower that needs compacted entries is
// sent that image, and the log is compacted up to the newest image this
// journal recorded at or below index - Config.CompactMargin, unless a
// snapshot is being sent to a follower (then compaction waits for the
// next image). The log so always starts right after an image (or at index
// 1), and the caller keeps that image (FirstIndex tells which).
func (l *ImageLog) ImageWritten(ctx context.Context, index, term uint64, membership []byte) error {
	return l.j.imageWritten(ctx, index, term, membership)
}

// FirstIndex is [Journal.FirstIndex].
func (l *ImageLog) FirstIndex() (uint64, error) { return l.j.FirstIndex() }

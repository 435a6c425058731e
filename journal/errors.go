package journal

import (
	"github.com/metatree/metatree/journal/internal/errs"
)

// Sentinel errors. Check them with errors.Is; returned errors wrap them with
// context.
var (
	// ErrNotLeader: the node asked to act as leader is not the leader.
	ErrNotLeader = errs.ErrNotLeader
	// ErrNoLeader: no leader is known (election in progress or quorum lost).
	ErrNoLeader = errs.ErrNoLeader
	// ErrStale: this node's replayed state is older than Config.StaleAfter.
	ErrStale = errs.ErrStale
	// ErrHalted: the node stopped writing, for one of two reasons. A
	// storage failure (a write or fsync of its journal failed, or Pebble
	// reported a fatal error): the error names the file and the operation
	// and wraps ErrClosed too. Or the applier met an entry this binary
	// cannot read: a *HaltError names the index and the version. Either
	// way the node accepts no write until it is restarted (with a binary
	// that reads the entry, for the second), which resumes from what is
	// durable; reads go on under the staleness guard.
	ErrHalted = errs.ErrHalted
	// ErrNoSpace: the data dir's disk is nearly full (free space under
	// Config.ReserveBytes); the write is refused, and writes resume by
	// themselves once space is freed.
	ErrNoSpace = errs.ErrNoSpace
	// ErrCorrupt: this member's state machine digest differs from the one
	// a majority of the voters reported at the same index (a
	// *CorruptError names the index, both digests and the voters): it
	// stopped applying, serving reads and taking part in raft. Replace
	// the member; it restores from a healthy member's image.
	ErrCorrupt = errs.ErrCorrupt
	// ErrClosed: the journal was closed. Its log store returns the same
	// value, so a read of a closed journal's log wraps it too.
	ErrClosed = errs.ErrClosed
	// ErrClusterMismatch: a request or a data dir belongs to another cluster
	// (cluster id or token differ).
	ErrClusterMismatch = errs.ErrClusterMismatch
	// ErrRoleMismatch: the configured role disagrees with the ROLE file or
	// with the role the cluster records for this node.
	ErrRoleMismatch = errs.ErrRoleMismatch
	// ErrUnsafeRemoval: removing the member would leave too few voters
	// reachable for a quorum; pass force to do it anyway.
	ErrUnsafeRemoval = errs.ErrUnsafeRemoval
	// ErrTooLarge: a proposal's data exceeds Config.MaxEntryBytes; it is
	// refused at once (no retry can commit it).
	ErrTooLarge = errs.ErrTooLarge
	// ErrInvalidProposal: the state machine (a ProposalChecker) refused a
	// proposal's data as no entry it reads; nothing entered the log. The
	// error wraps the state machine's own reason.
	ErrInvalidProposal = errs.ErrInvalidProposal
	// ErrBusy: a bounded queue is full (too many uncommitted bytes); retry.
	ErrBusy = errs.ErrBusy
	// ErrLocked: another process holds the data dir.
	ErrLocked = errs.ErrLocked
	// ErrUnreachable: the peer could not be reached.
	ErrUnreachable = errs.ErrUnreachable
	// ErrUnknownMember: no member with that id.
	ErrUnknownMember = errs.ErrUnknownMember
	// ErrRemoved: the sender was removed from the cluster. A member refuses
	// a removed node's messages with it, and the removed node, told so by
	// its transport (Receiver.ReportRemoved), reports Status().Removed.
	ErrRemoved = errs.ErrRemoved
	// ErrCompacted: the requested entries were compacted away.
	ErrCompacted = errs.ErrCompacted
	// ErrMalformed: an entry, message or request body could not be decoded.
	ErrMalformed = errs.ErrMalformed
	// ErrPeerIdentity: a peer request without the member certificate the
	// transport requires, or whose certificate names another member than
	// the one it speaks for (Config.TLS).
	ErrPeerIdentity = errs.ErrPeerIdentity
	// ErrSnapshotInFlight: compaction is postponed while a snapshot is being
	// sent to a follower.
	ErrSnapshotInFlight = errs.ErrSnapshotInFlight
	// ErrUnknownVersion: an entry, membership record or request has a format
	// version this code does not read. It is the journal's one
	// unknown-version error; ErrVersion is a node and a cluster whose
	// versions do not fit together, before any such data is read.
	ErrUnknownVersion = errs.ErrUnknownVersion
	// ErrVersion: the node cannot take part in the cluster at its cluster
	// version (it reads only older formats), or a request would lower it.
	ErrVersion = errs.ErrVersion
	// ErrNotCaughtUp: the observer to promote trails the leader's log by
	// more than Config.PromoteMaxLag entries; retry once it caught up.
	ErrNotCaughtUp = errs.ErrNotCaughtUp
	// ErrOutcomeUnknown: the proposal may or may not have applied. A copy
	// of it reached raft (or the leader) and Propose ended before this
	// node applied it: the context ended, the journal closed, the attempts
	// ran out with no word from the leader. Or this node installed an
	// image while the proposal waited, so some of its entries reached this
	// node only as the image's state, and whether (or with what result)
	// one of them was the proposal is not known here. The error wraps the
	// cause as well (the context's error, ErrNoLeader, ...). Read the
	// state before proposing it again: a new proposal is a new write.
	ErrOutcomeUnknown = errs.ErrOutcomeUnknown
)

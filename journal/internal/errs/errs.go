package errs

import (
	"errors"
	"fmt"

	"github.com/metatree/metatree/internal/formatversion"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// The journal's sentinel errors. Package journal re-exports each under the
// same name and documents it there; the internal packages return these
// values so that errors.Is against the journal's names holds.
var (
	ErrNotLeader        = errors.New("journal: not the leader")
	ErrNoLeader         = errors.New("journal: no leader")
	ErrStale            = errors.New("journal: stale")
	ErrHalted           = errors.New("journal: halted (restart the node)")
	ErrNoSpace          = errors.New("journal: no space left on the data dir's disk")
	ErrCorrupt          = errors.New("journal: corrupt (this member's state differs from the majority's)")
	ErrClosed           = raftstore.ErrClosed
	ErrClusterMismatch  = errors.New("journal: cluster mismatch")
	ErrRoleMismatch     = errors.New("journal: role mismatch")
	ErrUnsafeRemoval    = errors.New("journal: unsafe member removal")
	ErrTooLarge         = errors.New("journal: entry too large")
	ErrInvalidProposal  = errors.New("journal: invalid proposal")
	ErrBusy             = errors.New("journal: busy")
	ErrLocked           = errors.New("journal: data dir locked by another process")
	ErrUnreachable      = errors.New("journal: peer unreachable")
	ErrUnknownMember    = errors.New("journal: unknown member")
	ErrRemoved          = errors.New("journal: removed from the cluster")
	ErrCompacted        = errors.New("journal: entries compacted")
	ErrMalformed        = errors.New("journal: malformed")
	ErrPeerIdentity     = errors.New("journal: peer identity refused")
	ErrSnapshotInFlight = errors.New("journal: snapshot in flight")
	ErrUnknownVersion   = fmt.Errorf("journal: %w", formatversion.ErrUnknown)
	ErrVersion          = errors.New("journal: unsupported cluster version")
	ErrNotCaughtUp      = errors.New("journal: not caught up")
	ErrOutcomeUnknown   = errors.New("journal: outcome unknown")
)

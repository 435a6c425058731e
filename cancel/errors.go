package cancel

import (
	"errors"
	"fmt"

	"github.com/metatree/metatree/heartbeat/epoch"
)

// Sentinels. A *CanceledError unwraps to one of the first three.
var (
	// ErrNodeRestarted: a participant answered with a new epoch.
	ErrNodeRestarted = errors.New("cancel: node restarted")
	// ErrNodeDead: a participant was declared dead.
	ErrNodeDead = errors.New("cancel: node dead")
	// ErrNodeRemoved: a participant was removed from the cluster.
	ErrNodeRemoved = errors.New("cancel: node removed")
	// ErrClosed: the registry was closed; no more events will reach the
	// query, so it is cancelled rather than left unwatched.
	ErrClosed = errors.New("cancel: registry closed")
	// ErrInvalid: a Register call named the same node with two epochs.
	ErrInvalid = errors.New("cancel: invalid registration")
	// ErrUnknownNode: a fragment names a coordinator that no event has
	// named (RegisterFragment): nothing would ever cancel it.
	ErrUnknownNode = errors.New("cancel: unknown node")
)

// Reason says why a query was cancelled.
type Reason uint8

const (
	// Restarted: the node answered with a new epoch.
	Restarted Reason = iota + 1
	// Dead: the node was declared dead.
	Dead
	// Removed: the node was removed from the cluster.
	Removed
)

// String returns "restarted", "dead" or "removed".
func (r Reason) String() string {
	switch r {
	case Restarted:
		return "restarted"
	case Dead:
		return "dead"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

func (r Reason) sentinel() error {
	switch r {
	case Restarted:
		return ErrNodeRestarted
	case Dead:
		return ErrNodeDead
	default:
		return ErrNodeRemoved
	}
}

// CanceledError is the cause of a cancelled query (context.Cause) and the
// error of a registration against an epoch already superseded. It unwraps to
// ErrNodeRestarted, ErrNodeDead or ErrNodeRemoved.
type CanceledError struct {
	Node     uint64      // the member that restarted, died or was removed
	OldEpoch epoch.Epoch // the epoch the query was registered against (zero: never known)
	NewEpoch epoch.Epoch // the epoch that replaced it (temporary if dead, zero if removed)
	Reason   Reason
	Index    uint64 // index of the membership event (0 if unknown)
}

// Error describes the cancellation.
func (e *CanceledError) Error() string {
	switch e.Reason {
	case Restarted:
		return fmt.Sprintf("cancel: node %d restarted (epoch %s -> %s)", e.Node, epochText(e.OldEpoch), epochText(e.NewEpoch))
	case Dead:
		return fmt.Sprintf("cancel: node %d declared dead (epoch %s)", e.Node, epochText(e.OldEpoch))
	default:
		return fmt.Sprintf("cancel: node %d removed (epoch %s)", e.Node, epochText(e.OldEpoch))
	}
}

// epochText prints an epoch, "unknown" for the zero one.
func epochText(e epoch.Epoch) string {
	if e.IsZero() {
		return "unknown"
	}
	return e.String()
}

// Unwrap returns the sentinel for e.Reason.
func (e *CanceledError) Unwrap() error { return e.Reason.sentinel() }

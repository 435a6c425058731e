package epoch

import "fmt"

// Kind says what a member is.
type Kind uint8

const (
	// KindFrontend is a process that embeds the catalog and may coordinate
	// queries (a raft voter or learner).
	KindFrontend Kind = iota + 1
	// KindWorker is a process that runs query fragments.
	KindWorker
)

// String returns "frontend" or "worker".
func (k Kind) String() string {
	switch k {
	case KindFrontend:
		return "frontend"
	case KindWorker:
		return "worker"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "frontend":
		return KindFrontend, nil
	case "worker":
		return KindWorker, nil
	}
	return 0, fmt.Errorf("%w: unknown member kind %q", ErrInvalid, s)
}

// EventType says what happened to a member.
type EventType uint8

const (
	// Added: the member was added to the cluster (or was already there when
	// the observer started; one already dead then is delivered as Dead
	// instead). Nothing is cancelled.
	Added EventType = iota + 1
	// Restarted: the member answered with a new epoch. Work tied to any
	// other epoch of that member is void.
	Restarted
	// Dead: the member missed DeadAfter heartbeats in a row. Work tied to
	// it is void. NewEpoch is the temporary epoch published for it.
	Dead
	// Alive: the member answered for the first time (OldEpoch zero). A
	// member declared dead comes back with a fresh epoch (Restarted); an
	// Alive after Dead with the same epoch comes only from a log that an
	// older monitor wrote, or from a comparison across skipped transitions
	// (see Event).
	Alive
	// Removed: the member was removed from the cluster. Work tied to it is
	// void.
	Removed
)

// String returns the lower-case name of t.
func (t EventType) String() string {
	switch t {
	case Added:
		return "added"
	case Restarted:
		return "restarted"
	case Dead:
		return "dead"
	case Alive:
		return "alive"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event is one membership transition, delivered in log order. There is at
// most one event per member and Index, so a consumer may drop an event whose
// Index is not above the last it applied for that member as a replay, but
// for Index 0: a transition that the member record (or the leader's list)
// no longer shows, found when a later one is compared with an older view
// (a frontend's resync after an image load, a worker that missed lists).
// It comes just before the event that revealed it, is delivered once, and
// must be applied (cancel.Registry always applies Index 0): a member that
// was declared dead and came back arrives as Dead (Index 0) then Restarted
// to the fresh epoch it came back with (the record names its last death:
// heartbeat.Member.Died), or, from a log an older monitor wrote, Dead then Alive
// with its epoch.
//
// On a frontend, events come from replaying the member records in the
// catalog, so every frontend sees the same events in the same order, and
// Index is the journal index of the entry that made the change. On a
// worker, events come from the frontend list in the leader's heartbeats
// (responder.Responder); Index is then the catalog index that list was built at, or
// 0 for a list older than one the worker gave up on (its leader's lists
// stopped coming for StaleAfter, or it was forged): those events are no
// replays, and Index 0 has them applied.
type Event struct {
	Index      uint64 // journal (catalog) index of the change
	Node       uint64 // member id
	Kind       Kind
	Type       EventType
	OldEpoch   Epoch  // the epoch before the change (zero if none)
	NewEpoch   Epoch  // the epoch after it (temporary for Dead, zero for Removed)
	Generation uint64 // the member record's generation after the change
	// EpochGeneration is the generation at which the member record's
	// real epoch after the change (Member.Epoch) was first recorded, 0
	// when unknown: only between it and Generation can the member have
	// been declared dead and recorded back with that epoch, which a leader
	// of an older release does (this one records a return after a death
	// with the fresh epoch the member draws).
	EpochGeneration uint64
}

// String formats e for logs.
func (e Event) String() string {
	return fmt.Sprintf("%s %d %s at %d: %s -> %s (gen %d)", e.Kind, e.Node, e.Type, e.Index, e.OldEpoch, e.NewEpoch, e.Generation)
}

package heartbeat

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
)

// Catalog layout. Member records are nodes of kind MemberKind under
// MembersPath, named by the member id in decimal.
const (
	ClusterPath = "/_cluster"
	MembersPath = "/_cluster/members"
	// MonitorPath holds the claim of the leader whose monitor may journal
	// transitions (attrs leader, term, epoch). Every transition checks that
	// this record was last changed by its own claim, so a deposed leader's
	// transition fails its precondition and changes nothing.
	MonitorPath = "/_cluster/monitor"
	MemberKind  = "member"
)

// Member record attribute keys.
const (
	attrAddr       = "addr"
	attrKind       = "kind"
	attrRole       = "role"
	attrEpoch      = "epoch"
	attrGeneration = "generation"
	// attrEpochGeneration is the generation at which the epoch was first
	// recorded (absent in records of older releases: unknown).
	attrEpochGeneration = "epoch_generation"
	attrStatus          = "status"
	attrSince           = "since" // unix milliseconds, the leader's wall clock (informational)
	attrTerm            = "term"  // raft term of the leader that journaled the last transition
	attrDied            = "died"  // generation of the member's last death (absent: never declared dead)
	attrLeader          = "leader"
)

// Status is a member's journaled status.
type Status uint8

const (
	// StatusAlive: the member answers heartbeats (or has not yet missed
	// DeadAfter of them).
	StatusAlive Status = iota + 1
	// StatusDead: the member missed DeadAfter heartbeats in a row.
	StatusDead
)

// String returns "alive" or "dead".
func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusDead:
		return "dead"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

func parseStatus(s string) (Status, error) {
	switch s {
	case "alive":
		return StatusAlive, nil
	case "dead":
		return StatusDead, nil
	}
	return 0, fmt.Errorf("%w: unknown member status %q", ErrMalformed, s)
}

// Member is one member record as journaled in the catalog.
type Member struct {
	ID   uint64
	Addr string // host:port of its HTTP server (Responder mounted at Path)
	Kind epoch.Kind
	Role string // free-form: "follower", "observer", a worker's pool, ...
	// Epoch is the last real epoch the member answered with (zero: it has
	// not answered yet). It does not change when the member is declared
	// dead; PublishedEpoch gives the temporary epoch then.
	Epoch      epoch.Epoch
	Generation uint64 // bumped by every journaled transition
	// EpochGeneration is the generation at which Epoch was first recorded
	// (0: unknown, in a record of an older release, or no epoch yet). An
	// epoch's death can only come in the generations after it.
	EpochGeneration uint64
	Status          Status
	Since           time.Time // when the last transition was journaled (leader's clock)
	Term            uint64    // raft term of the leader that journaled it
	// Died is the generation at which the member was last declared dead
	// (0: never). It stays through the return and later transitions, so
	// a view that skipped transitions (an image, missed lists) sees that a
	// death came between: a member comes back from one with a fresh
	// epoch, which alone would look like a restart.
	Died     uint64
	Modified uint64 // catalog index of the record's last change
	// Created is the catalog index that created the record: a member
	// removed and added again under its id is a new incarnation, whose
	// generations count from zero again.
	Created uint64
}

// PublishedEpoch is the epoch the cluster publishes for m: its epoch while
// alive, its temporary epoch once declared dead.
func (m Member) PublishedEpoch() epoch.Epoch {
	if m.Status == StatusDead {
		return wire.TemporaryEpoch(m.Epoch, m.Generation)
	}
	return m.Epoch
}

// MemberPath returns the catalog path of member id's record.
func MemberPath(id uint64) string { return MembersPath + "/" + strconv.FormatUint(id, 10) }

// memberFromNode decodes a member record.
func memberFromNode(n *catalog.Node) (Member, error) {
	id, err := strconv.ParseUint(n.Name, 10, 64)
	if err != nil || id == 0 || !strings.HasPrefix(n.Path, MembersPath+"/") {
		return Member{}, fmt.Errorf("%w: member record %q: name is not a member id", ErrMalformed, n.Path)
	}
	m := Member{ID: id, Modified: n.Modified, Created: n.Created, Addr: n.Attrs[attrAddr].Str(), Role: n.Attrs[attrRole].Str()}
	if m.Kind, err = epoch.ParseKind(n.Attrs[attrKind].Str()); err != nil {
		return Member{}, fmt.Errorf("%w: member record %q: %w", ErrMalformed, n.Path, err)
	}
	if m.Epoch, err = epoch.Parse(n.Attrs[attrEpoch].Str()); err != nil {
		return Member{}, fmt.Errorf("%w: member record %q: %w", ErrMalformed, n.Path, err)
	}
	if m.Status, err = parseStatus(n.Attrs[attrStatus].Str()); err != nil {
		return Member{}, fmt.Errorf("member record %q: %w", n.Path, err)
	}
	m.Generation = uint64(n.Attrs[attrGeneration].Int64())
	m.EpochGeneration = uint64(n.Attrs[attrEpochGeneration].Int64())
	m.Term = uint64(n.Attrs[attrTerm].Int64())
	m.Died = uint64(n.Attrs[attrDied].Int64())
	if ms := n.Attrs[attrSince].Int64(); ms != 0 {
		m.Since = time.UnixMilli(ms)
	}
	return m, nil
}

// stateAttrs are the attributes a transition sets.
func (m Member) stateAttrs() map[string]catalog.Value {
	a := map[string]catalog.Value{
		attrEpoch:           catalog.String(m.Epoch.String()),
		attrGeneration:      catalog.Int(int64(m.Generation)),
		attrEpochGeneration: catalog.Int(int64(m.EpochGeneration)),
		attrStatus:          catalog.String(m.Status.String()),
		attrSince:           catalog.Int(m.Since.UnixMilli()),
		attrTerm:            catalog.Int(int64(m.Term)),
	}
	if m.Died != 0 {
		a[attrDied] = catalog.Int(int64(m.Died))
	}
	return a
}

// attrs are all the attributes of a new record.
func (m Member) attrs() map[string]catalog.Value {
	a := m.stateAttrs()
	a[attrAddr] = catalog.String(m.Addr)
	a[attrKind] = catalog.String(m.Kind.String())
	a[attrRole] = catalog.String(m.Role)
	return a
}

// eventsBetween derives the events of one record change, before -> after
// (nil: absent). index is the log index of the change.
//
// before and after need not be consecutive: a resync (after an image load
// or a watch overflow) compares the record it last read with the current
// one, and the transitions in between are gone from the catalog. What they
// did to the member's work is delivered all the same, each transition the
// record no longer shows as an event with Index 0 (unknown) ahead of the
// one at index:
//   - removed and added again (another Created): Removed, then as if new;
//   - alive, with a death recorded after the earlier view (Died above its
//     generation): Dead (at the generation after the earlier view, so
//     that the transitions skipped show on the next event), then what the
//     return was, Restarted to the fresh
//     epoch the member came back with (or Alive, for a log in which it
//     came back with the same one);
//   - alive with the same epoch but a later generation (a record with no
//     Died): it was declared dead in between and came back, so Dead, then
//     Alive (every transition bumps the generation, and only a death and
//     a return keep the epoch);
//   - alive at a later generation than its first answer would give, from
//     no epoch: it restarted or died in between, so Restarted;
//   - dead with an epoch first recorded after the earlier view
//     (EpochGeneration above its generation): the transition that recorded
//     it (Restarted, or Alive from no epoch), then its Dead.
func eventsBetween(before, after *Member, index uint64) []epoch.Event {
	switch {
	case before == nil && after == nil:
		return nil
	case before == nil:
		// One event per member and index (consumers drop a repeated index
		// as a replay): a member first seen dead is a single Dead event.
		if after.Status == StatusDead {
			return []epoch.Event{{Index: index, Node: after.ID, Kind: after.Kind, Type: epoch.Dead, OldEpoch: after.Epoch, NewEpoch: after.PublishedEpoch(), Generation: after.Generation, EpochGeneration: after.EpochGeneration}}
		}
		return []epoch.Event{{Index: index, Node: after.ID, Kind: after.Kind, Type: epoch.Added, NewEpoch: after.Epoch, Generation: after.Generation, EpochGeneration: after.EpochGeneration}}
	case after == nil:
		return []epoch.Event{{Index: index, Node: before.ID, Kind: before.Kind, Type: epoch.Removed, OldEpoch: before.PublishedEpoch(), Generation: before.Generation}}
	case before.Created != 0 && after.Created != 0 && before.Created != after.Created:
		return append(eventsBetween(before, nil, 0), eventsBetween(nil, after, index)...)
	case after.Status == StatusDead && after.Epoch != before.Epoch && !after.Epoch.IsZero() && after.EpochGeneration > before.Generation:
		// The epoch that died was recorded after the earlier view: its
		// record (alive at after.EpochGeneration), then its death. A
		// single Dead from before.Epoch would not name the epoch the
		// skipped transitions recorded, so a consumer would have to take
		// them for ones that may have ended an epoch it learnt ahead of
		// the events (cancel: aheadVerdict).
		recorded := *after
		recorded.Status = StatusAlive
		recorded.Generation = after.EpochGeneration
		if recorded.Died > recorded.Generation {
			// after's death came later; the last one before the record is
			// unknown, so the earlier view's stands.
			recorded.Died = before.Died
		}
		return append(eventsBetween(before, &recorded, 0), eventsBetween(&recorded, after, index)...)
	}
	ev := epoch.Event{Index: index, Node: after.ID, Kind: after.Kind, OldEpoch: before.PublishedEpoch(), NewEpoch: after.PublishedEpoch(), Generation: after.Generation, EpochGeneration: after.EpochGeneration}
	switch {
	case after.Status == StatusDead && (before.Status != StatusDead || before.PublishedEpoch() != after.PublishedEpoch()):
		ev.Type = epoch.Dead
		ev.OldEpoch = before.Epoch
	case after.Status == StatusDead:
		return nil
	case after.Epoch.IsZero():
		return nil // alive, never answered: nothing to act on
	case before.Status != StatusDead && !before.Epoch.IsZero() && after.Died > before.Generation:
		// The Dead takes the generation right after the earlier view, not
		// the death's: it ends before.Epoch, and the transitions between
		// (epochs recorded and ended there) stay for the next event, whose
		// generation shows them skipped. A Dead that showed them skipped
		// would end parts on an epoch a consumer learnt ahead of the
		// events (cancel: aheadVerdict) though the record first shows that
		// epoch after the death.
		died := epoch.Event{Node: after.ID, Kind: after.Kind, Type: epoch.Dead, OldEpoch: before.Epoch, NewEpoch: wire.TemporaryEpoch(before.Epoch, after.Died), Generation: before.Generation + 1, EpochGeneration: before.EpochGeneration}
		ev.Type = epoch.Restarted
		if after.Epoch == before.Epoch {
			ev.Type = epoch.Alive
		}
		ev.OldEpoch = died.NewEpoch
		return []epoch.Event{died, ev}
	case before.Status != StatusDead && before.Epoch == after.Epoch && after.Generation > before.Generation:
		gen := before.Generation + 1
		died := epoch.Event{Node: after.ID, Kind: after.Kind, Type: epoch.Dead, OldEpoch: before.Epoch, NewEpoch: wire.TemporaryEpoch(before.Epoch, gen), Generation: gen, EpochGeneration: before.EpochGeneration}
		ev.Type = epoch.Alive
		ev.OldEpoch = died.NewEpoch
		return []epoch.Event{died, ev}
	case before.Status != StatusDead && before.Epoch.IsZero() && after.Generation > before.Generation+1:
		ev.Type = epoch.Restarted
	case after.Epoch != before.Epoch && !before.Epoch.IsZero():
		ev.Type = epoch.Restarted
	case before.Status == StatusDead || before.Epoch.IsZero():
		ev.Type = epoch.Alive
	default:
		return nil // address, role or bookkeeping change
	}
	return []epoch.Event{ev}
}

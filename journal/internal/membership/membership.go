package membership

import (
	"encoding/json"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/errs"
)

// ConfContext travels in ConfChange.Context: the peer's address and role
// (so addresses are durable in the log) and the key of the proposal waiting
// for it.
type ConfContext struct {
	Addr string   `json:"addr,omitempty"`
	Role Role     `json:"role"`
	Key  [16]byte `json:"key"`
	// MaxVersion is the newest format version the member reads (0: not
	// said); the membership records it.
	MaxVersion uint32 `json:"max_version,omitempty"`
	// NoSpace raises (true) or clears (false) the member's no-space alarm
	// (nil: not said).
	NoSpace *bool `json:"no_space,omitempty"`
	// Window is the cluster's dedupe window, said by the conf change that
	// bootstraps the cluster (0: not said); the membership records it.
	Window uint64 `json:"dedupe_window,omitempty"`
}

// DecodeConfChange decodes a conf change entry and its context.
func DecodeConfChange(e *raftpb.Entry) (*raftpb.ConfChange, ConfContext, error) {
	var cc raftpb.ConfChange
	var ctx ConfContext
	if e.GetType() != raftpb.EntryConfChange {
		return nil, ctx, fmt.Errorf("%w: entry %d: conf change type %v unsupported", errs.ErrMalformed, e.GetIndex(), e.GetType())
	}
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		return nil, ctx, fmt.Errorf("%w: entry %d: conf change: %w", errs.ErrMalformed, e.GetIndex(), err)
	}
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &ctx); err != nil {
			return nil, ctx, fmt.Errorf("%w: entry %d: conf change context: %w", errs.ErrMalformed, e.GetIndex(), err)
		}
	}
	return &cc, ctx, nil
}

// Membership is the cluster configuration as of an index: raft's
// ConfState, the members' addresses and roles, the ids removed so far
// (they may never come back), the cluster's dedupe window, and the
// idempotency keys applied in the window before the index (so a node
// restored from an image at that index makes the same dedupe decisions as
// the others).
type Membership struct {
	V       int               `json:"v"`
	Index   uint64            `json:"index"`
	Voters  []uint64          `json:"voters"`
	Learner []uint64          `json:"learners,omitempty"`
	Members map[uint64]Member `json:"members"`
	Removed []uint64          `json:"removed,omitempty"`
	Keys    []dedupe.Key      `json:"keys,omitempty"`
	// Version is the cluster version as of Index (0: OldestVersion).
	Version uint32 `json:"version,omitempty"`
	// Window is the cluster's dedupe window: the bootstrap member's
	// Config.DedupeWindow, recorded by the cluster's first conf change and
	// carried by every later record, image and restore, so that every
	// replica and every rebuild decides each copy of a key alike (see
	// dedupe). 0: a cluster bootstrapped before the window was recorded;
	// each member then uses its own Config.DedupeWindow.
	Window uint64 `json:"dedupe_window,omitempty"`
	// Replaced lists the clusters this one replaced, oldest first (at most
	// MaxReplaced): a restore of a backup starts a new cluster that
	// replaces the backup's (and those it replaced), carried by every later
	// record and image. Heartbeats carry it, so that a worker that follows
	// a replaced cluster moves to this one at its first heartbeat and
	// refuses the replaced one's from then on.
	Replaced []string `json:"replaced,omitempty"`
}

// MaxReplaced bounds Membership.Replaced: the newest are kept.
const MaxReplaced = 8

// WindowOr returns the cluster's dedupe window, or local when m records
// none (or m is nil).
func (m *Membership) WindowOr(local uint64) uint64 {
	if m != nil && m.Window != 0 {
		return m.Window
	}
	return local
}

// ClusterVersion is the cluster version m records (version 1 until the
// leader raised it).
func (m *Membership) ClusterVersion() uint32 { return max(m.Version, envelope.OldestVersion) }

// EncodingVersion is the version of the encoding New writes and Decode reads.
const EncodingVersion = 1

// New returns an empty membership.
func New() *Membership {
	return &Membership{V: EncodingVersion, Members: map[uint64]Member{}}
}

// Clone returns a copy of m without its keys.
func (m *Membership) Clone() *Membership {
	c := *m
	c.Voters = slices.Clone(m.Voters)
	c.Learner = slices.Clone(m.Learner)
	c.Removed = slices.Clone(m.Removed)
	c.Replaced = slices.Clone(m.Replaced)
	c.Keys = nil
	c.Members = make(map[uint64]Member, len(m.Members))
	for k, v := range m.Members {
		c.Members[k] = v
	}
	return &c
}

// Encode returns m's JSON encoding.
func (m *Membership) Encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return b
}

// Decode decodes a membership Encode wrote.
func Decode(b []byte) (*Membership, error) {
	m := New()
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: membership blob: %w", errs.ErrMalformed, err)
	}
	if m.V != EncodingVersion {
		return nil, fmt.Errorf("%w: membership blob version %d (this code reads %d)", errs.ErrUnknownVersion, m.V, EncodingVersion)
	}
	if m.Members == nil {
		m.Members = map[uint64]Member{}
	}
	return m, nil
}

// ConfState returns m's voters and learners as raft's ConfState.
func (m *Membership) ConfState() *raftpb.ConfState {
	return raftpb.EnsureConfState(&raftpb.ConfState{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learner)})
}

// IsRemoved reports whether id was removed from the cluster.
func (m *Membership) IsRemoved(id uint64) bool { return slices.Contains(m.Removed, id) }

// Apply records a conf change (already applied to raft, which returned cs).
func (m *Membership) Apply(index uint64, cc *raftpb.ConfChange, ctx ConfContext, cs *raftpb.ConfState) {
	m.Index = index
	if m.Window == 0 {
		// The cluster's window is said once, by the change that
		// bootstraps it, and never changes.
		m.Window = ctx.Window
	}
	m.Voters = slices.Clone(cs.GetVoters())
	m.Learner = slices.Clone(cs.GetLearners())
	id := cc.GetNodeId()
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		mem := m.Members[id]
		mem.ID = id
		if ctx.Addr != "" {
			mem.Addr = ctx.Addr
		}
		mem.Role = Follower
		if cc.GetType() == raftpb.ConfChangeAddLearnerNode {
			mem.Role = Observer
		}
		if ctx.MaxVersion != 0 {
			mem.MaxVersion = ctx.MaxVersion
		}
		m.Members[id] = mem
	case raftpb.ConfChangeRemoveNode:
		delete(m.Members, id)
		if !m.IsRemoved(id) {
			m.Removed = append(m.Removed, id)
		}
	case raftpb.ConfChangeUpdateNode:
		if mem, ok := m.Members[id]; ok {
			if ctx.Addr != "" {
				mem.Addr = ctx.Addr
			}
			if ctx.MaxVersion != 0 {
				mem.MaxVersion = ctx.MaxVersion
			}
			if ctx.NoSpace != nil {
				mem.NoSpace = *ctx.NoSpace
			}
			m.Members[id] = mem
		}
	}
	// Keep members consistent with raft's view of roles.
	for _, v := range m.Voters {
		if mem, ok := m.Members[v]; ok {
			mem.Role = Follower
			m.Members[v] = mem
		}
	}
	for _, l := range m.Learner {
		if mem, ok := m.Members[l]; ok {
			mem.Role = Observer
			m.Members[l] = mem
		}
	}
}

// List returns the members in increasing order of id.
func (m *Membership) List() []Member {
	out := make([]Member, 0, len(m.Members))
	for _, mem := range m.Members {
		out = append(out, mem)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

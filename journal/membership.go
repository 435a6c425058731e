package journal

import (
	"encoding/json"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/dedupe"
)

// confContext travels in ConfChange.Context: the peer's address and role
// (so addresses are durable in the log) and the key of the proposal waiting
// for it.
type confContext struct {
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

func decodeConfChange(e *raftpb.Entry) (*raftpb.ConfChange, confContext, error) {
	var cc raftpb.ConfChange
	var ctx confContext
	if e.GetType() != raftpb.EntryConfChange {
		return nil, ctx, fmt.Errorf("%w: entry %d: conf change type %v unsupported", ErrMalformed, e.GetIndex(), e.GetType())
	}
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		return nil, ctx, fmt.Errorf("%w: entry %d: conf change: %w", ErrMalformed, e.GetIndex(), err)
	}
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &ctx); err != nil {
			return nil, ctx, fmt.Errorf("%w: entry %d: conf change context: %w", ErrMalformed, e.GetIndex(), err)
		}
	}
	return &cc, ctx, nil
}

// membership is the cluster configuration as of an index: raft's ConfState,
// the members' addresses and roles, the ids removed so far (they may never
// come back), the cluster's dedupe window, and the idempotency keys applied
// in the window before the index (so a node restored from an image at that
// index makes the same dedupe decisions as the others).
type membership struct {
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
}

// windowOr returns the cluster's dedupe window, or local when m records
// none.
func (m *membership) windowOr(local uint64) uint64 {
	if m != nil && m.Window != 0 {
		return m.Window
	}
	return local
}

const membershipVersion = 1

func newMembership() *membership {
	return &membership{V: membershipVersion, Members: map[uint64]Member{}}
}

func (m *membership) clone() *membership {
	c := *m
	c.Voters = slices.Clone(m.Voters)
	c.Learner = slices.Clone(m.Learner)
	c.Removed = slices.Clone(m.Removed)
	c.Keys = nil
	c.Members = make(map[uint64]Member, len(m.Members))
	for k, v := range m.Members {
		c.Members[k] = v
	}
	return &c
}

func (m *membership) encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return b
}

func decodeMembership(b []byte) (*membership, error) {
	m := newMembership()
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: membership blob: %w", ErrMalformed, err)
	}
	if m.V != membershipVersion {
		return nil, fmt.Errorf("%w: membership blob version %d (this code reads %d)", ErrUnknownVersion, m.V, membershipVersion)
	}
	if m.Members == nil {
		m.Members = map[uint64]Member{}
	}
	return m, nil
}

func (m *membership) confState() *raftpb.ConfState {
	return raftpb.EnsureConfState(&raftpb.ConfState{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learner)})
}

func (m *membership) isRemoved(id uint64) bool { return slices.Contains(m.Removed, id) }

// apply records a conf change (already applied to raft, which returned cs).
func (m *membership) apply(index uint64, cc *raftpb.ConfChange, ctx confContext, cs *raftpb.ConfState) {
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
		if !m.isRemoved(id) {
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

func (m *membership) list() []Member {
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

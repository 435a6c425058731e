package journal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Every normal raft entry the journal writes is an envelope:
//
//	kindUser:      [1][16-byte idempotency key][user data...]
//	kindTimestamp: [2][8-byte big-endian unix nanoseconds of the leader's clock]
//	kindUserSince: [3][16-byte idempotency key][8-byte big-endian since][user data...]
//	kindVersion:   [4][4-byte big-endian cluster version] (version.go)
//	kindCheck:     [5][operation]... (check.go)
//
// kindUserSince is a user entry that may apply only within the cluster's
// dedupe window (membership.Window) after since, a commit index its proposer knew before it made the
// entry's first copy (see dedupe.judge). It decodes as kindUser.
//
// An empty entry is raft's own (the leader's first entry of its term). The
// state machine only sees the user data of kindUser entries.
const (
	kindUser      byte = 1
	kindTimestamp byte = 2
	kindUserSince byte = 3
	keyLen             = 16
)

type envelope struct {
	kind  byte
	key   [16]byte
	data  []byte // user data (aliases the entry)
	ts    int64  // unix nanos for kindTimestamp
	since uint64 // kindUserSince's since
	// bounded: the entry carries since (kindUserSince).
	bounded bool
	check   checkEntry // kindCheck
}

func encodeUser(key [16]byte, data []byte) []byte {
	b := make([]byte, 1+keyLen+len(data))
	b[0] = kindUser
	copy(b[1:], key[:])
	copy(b[1+keyLen:], data)
	return b
}

// encodeUserSince is encodeUser for an entry the journal may propose more
// than once: every copy carries the same since.
func encodeUserSince(key [16]byte, since uint64, data []byte) []byte {
	b := make([]byte, 1+keyLen+8+len(data))
	b[0] = kindUserSince
	copy(b[1:], key[:])
	binary.BigEndian.PutUint64(b[1+keyLen:], since)
	copy(b[1+keyLen+8:], data)
	return b
}

func encodeTimestamp(unixNano int64) []byte {
	b := make([]byte, 9)
	b[0] = kindTimestamp
	binary.BigEndian.PutUint64(b[1:], uint64(unixNano))
	return b
}

// decodeEnvelope decodes a non-empty normal entry's data.
func decodeEnvelope(b []byte) (envelope, error) {
	if len(b) == 0 {
		return envelope{}, fmt.Errorf("%w: empty envelope", ErrMalformed)
	}
	switch b[0] {
	case kindUser:
		if len(b) < 1+keyLen {
			return envelope{}, fmt.Errorf("%w: user entry of %d bytes is shorter than its key", ErrMalformed, len(b))
		}
		e := envelope{kind: kindUser, data: b[1+keyLen:]}
		copy(e.key[:], b[1:1+keyLen])
		return e, nil
	case kindUserSince:
		if len(b) < 1+keyLen+8 {
			return envelope{}, fmt.Errorf("%w: user entry of %d bytes is shorter than its key and since", ErrMalformed, len(b))
		}
		e := envelope{kind: kindUser, data: b[1+keyLen+8:], since: binary.BigEndian.Uint64(b[1+keyLen:]), bounded: true}
		copy(e.key[:], b[1:1+keyLen])
		return e, nil
	case kindTimestamp:
		if len(b) != 9 {
			return envelope{}, fmt.Errorf("%w: timestamp entry of %d bytes", ErrMalformed, len(b))
		}
		return envelope{kind: kindTimestamp, ts: int64(binary.BigEndian.Uint64(b[1:]))}, nil
	case kindVersion:
		if _, err := decodeVersion(b); err != nil {
			return envelope{}, err
		}
		return envelope{kind: kindVersion}, nil
	case kindCheck:
		c, err := decodeCheck(b)
		if err != nil {
			return envelope{}, err
		}
		return envelope{kind: kindCheck, check: c}, nil
	}
	// A kind from a newer format: never skipped (see HaltError).
	return envelope{}, fmt.Errorf("%w: entry kind %d", ErrUnknownVersion, b[0])
}

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
	Keys    []appliedKey      `json:"keys,omitempty"`
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

type appliedKey struct {
	Index uint64   `json:"i"`
	Key   [16]byte `json:"k"`
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

// dedupe remembers the idempotency keys that reached the log in the last
// window indexes. A copy of a key within the window of the key's previous
// copy is a duplicate: it is skipped, and the window slides to it. The
// state after index N holds the copies in (N-window, N] that were recorded
// (every copy there, applied or skipped, but one that expired), in order.
// Whether a copy past its since's window is recorded depends on the copy
// of its key before it (within the window: a duplicate, recorded; else
// expired, not), which can lie before the window: so the window's entries
// alone do not give the state, and a replica rebuilds it (a restart, an
// image, a shadow checkpoint, a watch resumed from the log) from a state
// recorded earlier, an image's window, and every entry after it
// (Journal.dedupeAt); it then decides every later entry exactly as the
// live applier does.
type dedupe struct {
	window uint64
	byKey  map[[16]byte]dedupeRec
	order  []appliedKey // every copy, in index order; order[head:] is live
	head   int
}

type dedupeRec struct {
	index   uint64 // the key's latest copy: the window runs from it
	applied uint64 // the copy that was applied (or the oldest one known)
	value   any    // the local Apply result, when this process applied it
	imaged  bool   // known from an image's window only: value is unknown
}

func newDedupe(window uint64) *dedupe {
	return &dedupe{window: window, byKey: map[[16]byte]dedupeRec{}}
}

// setWindow makes window the window of the next decisions. The journal sets
// the cluster's window before it applies a user entry (learnWindow), so no
// decision is made under another.
func (d *dedupe) setWindow(window uint64) { d.window = window }

// copyVerdict is what the applier does with a copy of a user entry.
type copyVerdict int

const (
	copyApply     copyVerdict = iota // the first copy: applied, recorded
	copyDuplicate                    // within the window of the key's latest copy: skipped, recorded
	copyExpired                      // past its since's window: skipped, not recorded
)

// judge decides the copy of env at index, on every replica and in every
// rebuild alike (it depends on the window and the entry alone). A copy
// carrying since (the journal's own re-proposals) expires when it lands
// more than a window after since: every copy of one proposal lands after
// since, so the copies that do not expire lie within one window of each
// other and the first of them is the only one applied, however far apart
// they land. An expired copy is not recorded (it was not applied); its
// proposer, hearing of it, proposes again with a newer since.
func (d *dedupe) judge(index uint64, env envelope) (dedupeRec, copyVerdict) {
	if r, dup := d.seen(index, env.key); dup {
		return r, copyDuplicate
	}
	if env.bounded && index > env.since && index-env.since > d.window {
		return dedupeRec{}, copyExpired
	}
	return dedupeRec{}, copyApply
}

// seen reports the key's latest copy within the window ending at index
// (exclusive), and so whether the copy at index is a duplicate.
func (d *dedupe) seen(index uint64, key [16]byte) (dedupeRec, bool) {
	r, ok := d.byKey[key]
	if !ok || index-r.index > d.window {
		return dedupeRec{}, false
	}
	return r, true
}

// add records the copy of key at index: applied with result value, or, when
// seen, a duplicate (which keeps the applied copy's index and value).
func (d *dedupe) add(index uint64, key [16]byte, value any) {
	r, dup := d.seen(index, key)
	if dup {
		r.index = index
	} else {
		r = dedupeRec{index: index, applied: index, value: value}
	}
	d.byKey[key] = r
	d.order = append(d.order, appliedKey{Index: index, Key: key})
	d.evict(index)
}

func (d *dedupe) evict(index uint64) {
	for d.head < len(d.order) && index-d.order[d.head].Index > d.window {
		k := d.order[d.head]
		if r, ok := d.byKey[k.Key]; ok && r.index == k.Index {
			delete(d.byKey, k.Key)
		}
		d.order[d.head] = appliedKey{}
		d.head++
	}
	// Reclaim the evicted front once it is half the slice (amortised O(1)).
	if d.head > 1024 && d.head*2 >= len(d.order) {
		n := copy(d.order, d.order[d.head:])
		d.order = d.order[:n]
		d.head = 0
	}
}

// live returns the keys in the window, oldest first.
func (d *dedupe) live() []appliedKey { return d.order[d.head:] }

// reset replaces the state with the copies keys lists (an image's window,
// in index order).
func (d *dedupe) reset(keys []appliedKey) {
	d.byKey = map[[16]byte]dedupeRec{}
	d.order = d.order[:0]
	d.head = 0
	for _, k := range keys {
		r, ok := d.byKey[k.Key]
		if ok {
			r.index = k.Index
		} else {
			r = dedupeRec{index: k.Index, applied: k.Index, imaged: true}
		}
		d.byKey[k.Key] = r
		d.order = append(d.order, k)
	}
}

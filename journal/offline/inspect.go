package offline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// InspectOptions configures Inspect.
type InspectOptions struct {
	// FS is the filesystem (default: the OS, vfs.Default).
	FS vfs.FS
}

// Inspector reads a node's data dir offline, for tools (metactl): the
// VERSION, ROLE and MEMBERS files and the Pebble log, opened read-only.
// Nothing in the dir is changed. A dir that a running node holds is refused
// (journal.ErrLocked): Pebble cannot be read beside its writer, whose
// compactions remove files under the reader. While an Inspector is open no
// node can start on the dir. It is not safe for concurrent use.
type Inspector struct {
	fs    vfs.FS
	dir   string
	lock  io.Closer
	store *raftstore.Inspection

	version  map[string]string
	role     map[string]string
	problems []error // of the files, found at Inspect
}

// Inspect opens the data dir for reading. It fails when the dir holds no
// journal or a running node holds it; a damaged VERSION, ROLE or MEMBERS
// file is not an error here but one of Problems.
func Inspect(dir string, opts InspectOptions) (_ *Inspector, err error) {
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	in := &Inspector{fs: fs, dir: dir}
	if _, err := fs.Stat(dir); err != nil {
		return nil, operr.Errorf("journal: data dir %s: %w", dir, err)
	}
	// Lock the dir as a node does, but only when a node has run on it (a
	// missing LOCK file is not created: nothing is written).
	lockPath := filepath.Join(dir, "LOCK")
	if _, err := fs.Stat(lockPath); err == nil {
		in.lock, err = fs.Lock(lockPath)
		if err != nil {
			return nil, operr.Errorf("journal: %s: %w: a running node holds %s; stop it first (a running member can be backed up over HTTP): %w",
				dir, journal.ErrLocked, lockPath, err)
		}
	}
	defer func() {
		if err != nil && in.lock != nil {
			in.lock.Close()
		}
	}()
	in.store, err = raftstore.Inspect(fs, filepath.Join(dir, "journal"))
	if err != nil {
		return nil, operr.Errorf("journal: %s: %w", dir, err)
	}
	in.readFiles()
	return in, nil
}

func (in *Inspector) readFiles() {
	ver, ok, err := datadir.ReadKV(in.fs, filepath.Join(in.dir, datadir.VersionFile))
	switch {
	case err != nil:
		in.problems = append(in.problems, err)
	case !ok:
		in.problems = append(in.problems, fmt.Errorf("journal: %s: no VERSION file (a bootstrap or join that did not finish)", in.dir))
	case ver["cluster_id"] == "":
		in.problems = append(in.problems, fmt.Errorf("journal: %s: VERSION has no cluster_id", filepath.Join(in.dir, "VERSION")))
	}
	if _, err := datadir.VersionNodeID(in.dir, ver); err != nil {
		in.problems = append(in.problems, err)
	}
	in.version = ver
	role, ok, err := datadir.ReadKV(in.fs, filepath.Join(in.dir, datadir.RoleFile))
	switch {
	case err != nil:
		in.problems = append(in.problems, err)
	case !ok:
		if in.version != nil {
			in.problems = append(in.problems, fmt.Errorf("journal: %s: VERSION without ROLE file", in.dir))
		}
	default:
		if _, err := journal.ParseRole(role["role"]); err != nil {
			in.problems = append(in.problems, operr.Errorf("journal: %s: %w", filepath.Join(in.dir, "ROLE"), err))
		}
	}
	in.role = role
}

// Close releases the dir.
func (in *Inspector) Close() error {
	err := in.store.Close()
	if in.lock != nil {
		err = errors.Join(err, in.lock.Close())
	}
	return err
}

// DirStatus is what a data dir records about its node and its log.
type DirStatus struct {
	// ClusterID and NodeID come from VERSION (NodeID 0: not recorded).
	ClusterID string
	NodeID    uint64
	// Role comes from ROLE (RoleUnset: none or unreadable).
	Role journal.Role
	// FirstIndex and LastIndex bound the log as raft sees it: entries
	// [FirstIndex, LastIndex] are kept (LastIndex = FirstIndex-1: none).
	FirstIndex, LastIndex uint64
	// Term, Vote and Commit are the durable HardState.
	Term, Vote, Commit uint64
	// SnapshotIndex and SnapshotTerm are those of raft's snapshot, the
	// image recorded last (0: none).
	SnapshotIndex, SnapshotTerm uint64
	// MembershipIndex is the index of the newest membership (from the log's
	// records or the MEMBERS file, whichever is newer); Voters, Learners
	// and Members are that membership.
	MembershipIndex uint64
	Voters          []uint64
	Learners        []uint64
	Members         []journal.Member
}

// Status returns what the dir records.
func (in *Inspector) Status() DirStatus {
	st := DirStatus{ClusterID: in.version["cluster_id"]}
	st.NodeID, _ = datadir.VersionNodeID(in.dir, in.version)
	st.Role, _ = journal.ParseRole(in.role["role"])
	s := in.store
	st.FirstIndex, st.LastIndex = s.TruncIndex+1, s.LastIndex()
	st.Term, st.Vote, st.Commit = s.HardState.GetTerm(), s.HardState.GetVote(), s.HardState.GetCommit()
	st.SnapshotIndex, st.SnapshotTerm = s.Snapshot.GetMetadata().GetIndex(), s.Snapshot.GetMetadata().GetTerm()
	if m, _ := in.membership(); m != nil {
		st.MembershipIndex = m.Index
		st.Voters = slices.Clone(m.Voters)
		st.Learners = slices.Clone(m.Learner)
		st.Members = m.List()
	}
	return st
}

// membership returns the newest of the log's membership records and the
// MEMBERS file (as journal.Open picks it), and the problems met reading them.
func (in *Inspector) membership() (*membership.Membership, []error) {
	var problems []error
	var m *membership.Membership
	if blob, err := in.store.MembershipAt(math.MaxUint64); err == nil {
		if m, err = membership.Decode(blob); err != nil {
			problems = append(problems, operr.Errorf("journal: %s: newest membership record: %w", in.dir, err))
		}
	} else if !errors.Is(err, raftstore.ErrNoMembership) {
		problems = append(problems, operr.Errorf("journal: %s: %w", in.dir, err))
	}
	file, err := datadir.ReadMembers(in.fs, in.dir)
	if err != nil {
		problems = append(problems, err)
	}
	if m != nil && file != nil && m.Index == file.Index &&
		(!slices.Equal(sorted(m.Voters), sorted(file.Voters)) || !slices.Equal(sorted(m.Learner), sorted(file.Learner))) {
		problems = append(problems, fmt.Errorf("journal: %s: %s and the log disagree on the membership at index %d: voters %v learners %v against voters %v learners %v",
			in.dir, datadir.MembersFile, m.Index, file.Voters, file.Learner, m.Voters, m.Learner))
	}
	if file != nil && (m == nil || file.Index > m.Index) {
		m = file
	}
	if m == nil && in.store.Snapshot.GetMetadata().GetIndex() > 0 {
		if sm, err := membership.Decode(in.store.Snapshot.GetData()); err == nil {
			m = sm
		}
	}
	return m, problems
}

func sorted(ids []uint64) []uint64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// Problems checks every property of the dir that can be checked offline
// and returns one error per problem found (none: the dir is consistent):
// VERSION and ROLE are present and well-formed; the log's metadata decodes
// and satisfies what journal.Open requires; the log is contiguous from its
// truncation point to its last entry, every entry decodes and terms never
// decrease; MEMBERS agrees with the log's membership; ROLE agrees with the
// node's role in the membership; the node was not removed; no temporary
// file of VERSION, ROLE or MEMBERS is left. The images are the image
// package's to check.
func (in *Inspector) Problems() []error {
	out := slices.Clone(in.problems)
	for _, err := range in.store.Problems() {
		out = append(out, operr.Errorf("journal: %s: %w", filepath.Join(in.dir, "journal"), err))
	}
	m, problems := in.membership()
	out = append(out, problems...)
	id, _ := datadir.VersionNodeID(in.dir, in.version)
	role, roleErr := journal.ParseRole(in.role["role"])
	if m != nil && id != 0 && roleErr == nil {
		switch mem, ok := m.Members[id]; {
		case m.IsRemoved(id):
			out = append(out, fmt.Errorf("journal: %s: node %d was removed from the cluster at or before index %d: this dir may not start again", in.dir, id, m.Index))
		case !ok:
			out = append(out, fmt.Errorf("journal: %s: node %d is not in the membership as of index %d (members %v)", in.dir, id, m.Index, memberIDs(m)))
		case mem.Role != role:
			out = append(out, fmt.Errorf("journal: %s: ROLE says %s, but the membership as of index %d has node %d as %s",
				in.dir, role, m.Index, id, mem.Role))
		}
	}
	for _, name := range []string{datadir.VersionFile, datadir.RoleFile, datadir.MembersFile} {
		tmp := filepath.Join(in.dir, name+".tmp")
		if _, err := in.fs.Stat(tmp); err == nil {
			out = append(out, fmt.Errorf("journal: leftover temporary file %s (an interrupted rewrite of %s; startup leaves it, and it may be removed)", tmp, name))
		}
	}
	return out
}

func memberIDs(m *membership.Membership) []uint64 {
	var ids []uint64
	for _, mem := range m.List() {
		ids = append(ids, mem.ID)
	}
	return ids
}

// Entries calls fn for every entry kept in the log with an index in
// [from, to], in order, decoded (DecodeEntry). An entry that does not
// decode is passed with Kind "malformed" and Err set; a missing range is
// passed as one Entry of Kind "missing" (Index, Term 0 and Err naming the
// range). fn's error stops the scan and is returned.
func (in *Inspector) Entries(from, to uint64, fn func(Entry) error) error {
	first := in.store.TruncIndex + 1
	last := in.store.LastIndex()
	lo, hi := max(from, first), min(to, last)
	if lo > hi {
		return nil
	}
	next := lo
	err := in.store.Scan(lo, hi, func(index uint64, e *raftpb.Entry, err error) error {
		if index > next {
			if err := fn(missing(next, index-1)); err != nil {
				return err
			}
		}
		if index != 0 {
			next = index + 1
		}
		if err != nil {
			return fn(Entry{Index: index, Kind: KindMalformed, Err: fmt.Errorf("%w: %w", journal.ErrMalformed, err)})
		}
		return fn(DecodeEntry(e))
	})
	if err != nil {
		return err
	}
	if next <= hi {
		return fn(missing(next, hi))
	}
	return nil
}

func missing(lo, hi uint64) Entry {
	return Entry{Index: lo, Kind: KindMissing, Err: fmt.Errorf("%w: entries [%d, %d] are missing from the log", journal.ErrMalformed, lo, hi)}
}

// Kinds of Entry.
const (
	KindEmpty       = "empty"        // raft's own entry (a new leader's first)
	KindUser        = "user"         // a proposal: idempotency key and data
	KindTimestamp   = "timestamp"    // the leader's clock, for the staleness guard
	KindConfChange  = "conf_change"  // a membership change
	KindVersion     = "version"      // the leader raises the cluster's format version
	KindCheckMark   = "check_mark"   // the leader starts a consistency check round
	KindCheckReport = "check_report" // a member reports its state digest at a mark
	KindCheckClear  = "check_clear"  // an operator cleared the consistency alarm
	KindMalformed   = "malformed"    // an entry that does not decode (Err says why)
	KindMissing     = "missing"      // a range absent from the log (Err names it)
)

// Entry is one log entry decoded for a person.
type Entry struct {
	Index, Term uint64
	// Type is raft's entry type: "normal", "conf_change" or
	// "conf_change_v2".
	Type string
	// Kind says what the entry holds (the Kind* constants).
	Kind string
	// Key is a user entry's idempotency key.
	Key [16]byte
	// Data is a user entry's data (for metatree, an encoded catalog batch).
	Data []byte
	// UnixNano is a timestamp entry's leader clock.
	UnixNano int64
	// Version is a version entry's cluster version.
	Version uint32
	// Mark, Member and Digest are a check report's: the mark's index, the
	// reporting member and its state digest there.
	Mark, Member uint64
	Digest       []byte
	// DigestFormat is a check mark's: the format of the digests compared
	// at it (1 for a mark that names none).
	DigestFormat int
	// Change is a conf change's content.
	Change *ConfChange
	// Err says why a malformed entry does not decode.
	Err error
}

// ConfChange is a decoded membership change.
type ConfChange struct {
	// Type is "add_node", "add_learner_node", "remove_node" or
	// "update_node".
	Type   string
	NodeID uint64
	Addr   string
	Role   journal.Role
	// Key is the idempotency key of the proposal that made it (zero for a
	// bootstrap's or a forced recovery's).
	Key [16]byte
}

// DecodeEntry decodes a raft entry as the journal writes them. It never
// panics: whatever does not decode is reported in Err with Kind
// KindMalformed.
func DecodeEntry(e *raftpb.Entry) Entry {
	out := Entry{Index: e.GetIndex(), Term: e.GetTerm(), Type: entryTypeName(e.GetType())}
	switch e.GetType() {
	case raftpb.EntryNormal:
		if len(e.GetData()) == 0 {
			out.Kind = KindEmpty
			return out
		}
		env, err := envelope.Decode(e.GetData())
		if err != nil {
			out.Kind, out.Err = KindMalformed, err
			return out
		}
		switch env.Kind {
		case envelope.KindUser:
			out.Kind, out.Key, out.Data = KindUser, env.Key, env.Data
		case envelope.KindTimestamp:
			out.Kind, out.UnixNano = KindTimestamp, env.TS
		case envelope.KindVersion:
			v, _ := envelope.DecodeVersion(e.GetData()) // envelope.Decode checked it
			out.Kind, out.Version = KindVersion, v
		case envelope.KindCheck:
			switch c := env.Check; c.Op {
			case envelope.CheckMark:
				out.Kind, out.DigestFormat = KindCheckMark, int(c.Format)
			case envelope.CheckReport:
				out.Kind, out.Mark, out.Member, out.Digest = KindCheckReport, c.Mark, c.From, c.Digest
			case envelope.CheckClear:
				out.Kind = KindCheckClear
			}
		}
	case raftpb.EntryConfChange:
		cc, ctx, err := membership.DecodeConfChange(e)
		if err != nil {
			out.Kind, out.Err = KindMalformed, err
			return out
		}
		out.Kind = KindConfChange
		out.Change = &ConfChange{Type: confChangeTypeName(cc.GetType()), NodeID: cc.GetNodeId(), Addr: ctx.Addr, Role: ctx.Role, Key: ctx.Key}
	default:
		out.Kind, out.Err = KindMalformed, fmt.Errorf("%w: entry %d: type %v is not one the journal writes", journal.ErrMalformed, e.GetIndex(), e.GetType())
	}
	return out
}

func entryTypeName(t raftpb.EntryType) string {
	switch t {
	case raftpb.EntryNormal:
		return "normal"
	case raftpb.EntryConfChange:
		return "conf_change"
	case raftpb.EntryConfChangeV2:
		return "conf_change_v2"
	}
	return fmt.Sprintf("type(%d)", int32(t))
}

func confChangeTypeName(t raftpb.ConfChangeType) string {
	switch t {
	case raftpb.ConfChangeAddNode:
		return "add_node"
	case raftpb.ConfChangeAddLearnerNode:
		return "add_learner_node"
	case raftpb.ConfChangeRemoveNode:
		return "remove_node"
	case raftpb.ConfChangeUpdateNode:
		return "update_node"
	}
	return fmt.Sprintf("type(%d)", int32(t))
}

// MarshalJSON encodes a ConfChange for tools.
func (c ConfChange) MarshalJSON() ([]byte, error) {
	type out struct {
		Type   string       `json:"type"`
		NodeID uint64       `json:"node_id"`
		Addr   string       `json:"addr,omitempty"`
		Role   journal.Role `json:"role"`
	}
	return json.Marshal(out{c.Type, c.NodeID, c.Addr, c.Role})
}

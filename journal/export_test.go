package journal

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/diskguard"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/rafthttp"
)

// CheckRemovalForTest runs on the raft loop the check that
// RemoveMember(id, false) runs on the leader, and returns its verdict
// without proposing anything.
func (j *Journal) CheckRemovalForTest(ctx context.Context, id uint64) error {
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}
	var err error
	if derr := j.do(ctx, func() { err = j.checkConfChange(cc, false) }); derr != nil {
		return derr
	}
	return err
}

// ReachableForTest reports, from the raft loop, whether j counts peer id
// as reachable for a removal check (it heard from it within its last
// election timeout of ticks).
func (j *Journal) ReachableForTest(ctx context.Context, id uint64) (bool, error) {
	var ok bool
	if err := j.do(ctx, func() { ok = j.reachable(id) }); err != nil {
		return false, err
	}
	return ok, nil
}

// CampaignsForTest counts the vote requests j sent.
func (j *Journal) CampaignsForTest() uint64 { return j.campaigns.Load() }

// RefusedRemovedForTest counts the messages j refused because their
// sender was removed.
func (j *Journal) RefusedRemovedForTest() uint64 { return j.refusedRemoved.Load() }

// ReadRoundsSentForTest counts the ReadIndex rounds j sent.
func (j *Journal) ReadRoundsSentForTest() uint64 { return j.rounds.Sent() }

// RaftConfigForTest returns, from the raft loop, the voters and learners
// of j's raft configuration, sorted.
func (j *Journal) RaftConfigForTest(ctx context.Context) (voters, learners []uint64, err error) {
	err = j.do(ctx, func() {
		cfg := j.loop.rn.Status().Config
		learners = slices.Sorted(maps.Keys(cfg.Learners))
		voters = slices.Sorted(maps.Keys(cfg.Voters.IDs()))
	})
	return voters, learners, err
}

// MaxEntryBytesForTest returns j's Config.MaxEntryBytes, its default
// filled in.
func (j *Journal) MaxEntryBytesForTest() uint64 { return j.cfg.MaxEntryBytes }

// HaltedForTest returns a channel closed once j's log store halted on a
// storage failure.
func (j *Journal) HaltedForTest() <-chan struct{} { return j.store.HaltedCh() }

// WriteErrorForTest writes err as the journal's HTTP handler answers it.
func WriteErrorForTest(w http.ResponseWriter, err error) { rafthttp.WriteError(w, err) }

// BallastNameForTest is the name of the emergency ballast file in the
// data dir.
const BallastNameForTest = diskguard.BallastName

// CheckSpaceForTest runs j's free-space guard's check once, without
// reporting a change of its alarm to the cluster.
func (j *Journal) CheckSpaceForTest() error { return j.space.Check() }

// CheckAndReportSpaceForTest runs j's free-space check as its interval
// does: the guard's check, then the alarm reported to the cluster if it
// changed, waiting (bounded) for that change to apply.
func (j *Journal) CheckAndReportSpaceForTest() { j.checkSpace() }

// WritableForTest returns why j refuses new writes at once (halted, its
// disk nearly full, a voter's no-space alarm, removed), or nil.
func (j *Journal) WritableForTest() error { return j.writable() }

// AdmitForwardedForTest returns what of msgs, received in raft's stream,
// j passes to raft: the forwarded entries it does not take now are
// dropped, the rest delivered.
func (j *Journal) AdmitForwardedForTest(msgs []*raftpb.Message) []*raftpb.Message {
	return j.admitForwarded(msgs)
}

// EncodeUserForTest returns the entry envelope of a user proposal of data
// under key.
func EncodeUserForTest(key [16]byte, data []byte) []byte { return envelope.EncodeUser(key, data) }

// ReceiveForTest steps msgs into j as its transport's Receiver does with
// what arrives from a peer.
func (j *Journal) ReceiveForTest(ctx context.Context, msgs []*raftpb.Message) error {
	return j.receive(ctx, msgs)
}

// EncodeTimestampForTest returns the entry envelope of a leader's
// timestamp of unixNano.
func EncodeTimestampForTest(unixNano int64) []byte { return envelope.EncodeTimestamp(unixNano) }

// HandleForwardForTest runs on j what a peer's forwarded request asks, as
// its transport's Receiver does.
func (j *Journal) HandleForwardForTest(ctx context.Context, req *ForwardRequest) (*ForwardResponse, error) {
	return j.handleForward(ctx, req)
}

// ConfContextForTest is the context a membership change carries.
type ConfContextForTest = membership.ConfContext

// ProposeConfChangeRawForTest proposes the membership change typ of node
// id, with cctx, on leader j's raft loop, past the proposal checks (as an
// older version, an earlier leader or a forged append would put it in the
// log), and returns once raft took the proposal.
func (j *Journal) ProposeConfChangeRawForTest(ctx context.Context, typ raftpb.ConfChangeType, id uint64, cctx ConfContextForTest) error {
	cc := &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(id), Context: mustJSON(cctx)}
	var perr error
	if err := j.do(ctx, func() { perr = j.loop.rn.ProposeConfChange(cc) }); err != nil {
		return err
	}
	return perr
}

// ProposeConfChangeUncheckedForTest is ProposeConfChangeRawForTest of a
// change under key alone, which returns what its apply answered.
func (j *Journal) ProposeConfChangeUncheckedForTest(ctx context.Context, typ raftpb.ConfChangeType, id uint64, key [16]byte) error {
	var w waiter
	j.addWaiter(key, &w)
	defer j.removeWaiter(key, &w)
	if err := j.ProposeConfChangeRawForTest(ctx, typ, id, ConfContextForTest{Key: key}); err != nil {
		return err
	}
	select {
	case r := <-w.c:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ProposeRawForTest proposes the entry data, an envelope, on leader j's
// raft loop, past the proposal checks, and returns once raft took it.
func (j *Journal) ProposeRawForTest(ctx context.Context, data []byte) error {
	var perr error
	if err := j.do(ctx, func() { perr = j.loop.rn.Propose(data) }); err != nil {
		return err
	}
	return perr
}

// EncodeVersionForTest returns the entry envelope raising the cluster to
// format version v.
func EncodeVersionForTest(v uint32) []byte { return envelope.EncodeVersion(v) }

// HandleJoinForTest runs on j a joining node's request, as its
// transport's Receiver does.
func (j *Journal) HandleJoinForTest(ctx context.Context, req *JoinRequest) (*JoinResponse, error) {
	return j.handleJoin(ctx, req)
}

// LogEntriesForTest returns the entries of j's log store in [lo, hi).
func (j *Journal) LogEntriesForTest(lo, hi uint64) ([]*raftpb.Entry, error) {
	return j.store.Entries(lo, hi, 1<<62)
}

// IsVersionEntryForTest reports whether e raises the cluster version.
func IsVersionEntryForTest(e *raftpb.Entry) bool { return isVersionEntry(e) }

// DecodeConfChangeForTest returns the membership change e carries.
func DecodeConfChangeForTest(e *raftpb.Entry) (*raftpb.ConfChange, error) {
	cc, _, err := membership.DecodeConfChange(e)
	return cc, err
}

// SetDropForTest installs h's drop hook: the traffic between from and to
// for which drop reports true is dropped, as a cut link drops it.
func (h *HTTPTransport) SetDropForTest(drop func(from, to uint64) bool) { h.t.SetDrop(drop) }

// LastIndexForTest returns the last index of j's durable log.
func (j *Journal) LastIndexForTest() (uint64, error) { return j.store.LastIndex() }

// KnowsMemberForTest reports whether the membership j applied names node
// id.
func (j *Journal) KnowsMemberForTest(id uint64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.mu.membership.Members[id]
	return ok
}

// AddMemberWithoutRaftForTest adds m to the membership j applied with no
// conf change, so that no image or raft configuration knows it.
func (j *Journal) AddMemberWithoutRaftForTest(m Member) {
	j.mu.Lock()
	defer j.mu.Unlock()
	ms := j.mu.membership.Clone()
	ms.Members[m.ID] = m
	j.mu.membership = ms
}

// RaftSnapshotForTest returns what raft reads from j's raft.Storage when
// it needs an image to send a member.
func (j *Journal) RaftSnapshotForTest() (*raftpb.Snapshot, error) {
	return raftStorage{Store: j.store, j: j}.Snapshot()
}

// MembershipBlobAtForTest returns the membership blob j hands to an
// image taken at index i.
func (j *Journal) MembershipBlobAtForTest(i uint64) ([]byte, error) { return j.membershipBlobAt(i) }

// ImageWrittenForTest tells j, as the image package does, that an image
// at index (of term, with the membership blob it was handed) is written.
func (j *Journal) ImageWrittenForTest(ctx context.Context, index, term uint64, membership []byte) error {
	return j.imageWritten(ctx, index, term, membership)
}

// ConfStateOfBlobForTest returns raft's configuration of the membership
// blob b (as an image carries it).
func ConfStateOfBlobForTest(b []byte) (*raftpb.ConfState, error) {
	m, err := membership.Decode(b)
	if err != nil {
		return nil, err
	}
	return m.ConfState(), nil
}

// DurableCommitForTest returns the commit index of j's durable HardState.
func (j *Journal) DurableCommitForTest() uint64 { return j.store.HardState().GetCommit() }

// MembershipRecordForTest returns the membership j's store records as of
// index i, as MembershipContentForTest returns it.
func (j *Journal) MembershipRecordForTest(i uint64) ([]byte, error) {
	raw, err := j.store.MembershipAt(i)
	if err != nil {
		return nil, err
	}
	return MembershipContentForTest(raw)
}

// MembershipContentForTest returns the membership blob b without the
// index of its record and the dedupe keys an image's record adds: what
// two records of one membership have in common.
func MembershipContentForTest(b []byte) ([]byte, error) {
	m, err := membership.Decode(b)
	if err != nil {
		return nil, err
	}
	m.Index, m.Keys = 0, nil
	return m.Encode(), nil
}

// MembershipIDsForTest returns the members and the removed nodes of the
// membership blob b, sorted.
func MembershipIDsForTest(b []byte) (members, removed []uint64, err error) {
	m, err := membership.Decode(b)
	if err != nil {
		return nil, nil, err
	}
	return slices.Sorted(maps.Keys(m.Members)), m.Removed, nil
}

// KnobsForTest are the testing hooks of a journal (Config.knobs), as
// testingKnobs documents them.
type KnobsForTest = testingKnobs

// SetKnobsForTest gives the journal opened with cfg the hooks k.
func SetKnobsForTest(cfg *Config, k KnobsForTest) { cfg.knobs = &k }

// ApplyQueueForTest returns the state of j's apply queue: whether it is
// full, and the bytes and batches it holds.
func (j *Journal) ApplyQueueForTest() (full bool, bytes uint64, batches int) {
	full = j.applyq.full()
	j.applyq.mu.Lock()
	defer j.applyq.mu.Unlock()
	return full, j.applyq.bytes, len(j.applyq.items)
}

// SnapshotsOutAddForTest adds delta to j's count of snapshot transfers
// in flight (none compacts the log while it is positive).
func (j *Journal) SnapshotsOutAddForTest(delta int64) { j.snapsOut.Add(delta) }

// SnapshotsOutForTest returns j's count of snapshot transfers in flight.
func (j *Journal) SnapshotsOutForTest() int64 { return j.snapsOut.Load() }

// LogFirstIndexForTest returns the first index of j's log store.
func (j *Journal) LogFirstIndexForTest() (uint64, error) { return j.store.FirstIndex() }

// RecordMembershipWithoutKeysForTest rewrites the membership record of
// j's store at index i as the record of index i-1 without the dedupe keys
// an image's record adds: the window recorded at i is gone.
func (j *Journal) RecordMembershipWithoutKeysForTest(i uint64) error {
	blob, err := j.store.MembershipAt(i)
	if err != nil {
		return err
	}
	m, err := membership.Decode(blob)
	if err != nil {
		return err
	}
	m.Index, m.Keys = i-1, nil
	return j.store.SaveMembership(i, m.Encode())
}

// ProposeTurnForTest proposes, in one turn of leader j's raft loop and
// past the proposal checks, the entries (envelopes) ents returns for the
// commit index raft has then: raft appends them at consecutive indexes
// after the last.
func (j *Journal) ProposeTurnForTest(ctx context.Context, ents func(commit uint64) [][]byte) error {
	var perr error
	if err := j.do(ctx, func() {
		for _, e := range ents(j.loop.rn.Status().GetCommit()) {
			if perr = j.loop.rn.Propose(e); perr != nil {
				return
			}
		}
	}); err != nil {
		return err
	}
	return perr
}

// DedupeVerdictAtForTest returns what the dedupe window j rebuilds at
// index at decides of a bounded user copy of key with since, at index.
func (j *Journal) DedupeVerdictAtForTest(at, index uint64, key [16]byte, since uint64) (dedupe.Verdict, error) {
	d, err := j.dedupeAt(at)
	if err != nil {
		return 0, err
	}
	_, v := d.Judge(index, envelope.Envelope{Kind: envelope.KindUser, Key: key, Since: since, Bounded: true})
	return v, nil
}

// MembersFileForTest returns what j's MEMBERS file records: the index of
// the membership and its members.
func (j *Journal) MembersFileForTest() (index uint64, members map[uint64]Member, err error) {
	m, err := j.readMembers()
	if err != nil {
		return 0, nil, err
	}
	return m.Index, m.Members, nil
}

// MembershipIndexForTest returns the index of the membership blob b.
func MembershipIndexForTest(b []byte) (uint64, error) {
	m, err := membership.Decode(b)
	if err != nil {
		return 0, err
	}
	return m.Index, nil
}

// LoopOpsForTest is the channel of operations j's raft loop runs between
// its turns.
func (j *Journal) LoopOpsForTest() chan<- func() { return j.opc }

// CheckVersionForTest is the cluster version that reads consistency
// check entries.
const CheckVersionForTest = checkVersion

// ChecksForTest returns how many consistency checks j compared.
func (j *Journal) ChecksForTest() uint64 { return j.checker.Count() }

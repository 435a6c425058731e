package journal

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/membership"
)

// Messages from the network are checked before raft steps them: raft
// trusts its peers and panics on what a correct peer never sends (raft
// v3.7.0's Step, stepLeader, stepFollower, handleAppendEntries,
// handleHeartbeat and restore). A refused message is dropped, counted in
// Status.RefusedMessages and logged; raft sees nothing of it, not even its
// term. What a message can be checked against alone is checked in Receive
// (checkMessage), so the sender hears of it; what depends on the log
// (checkAgainstLog) is checked again on the raft loop, right before Step.

// checkMessage refuses a message from the network that raft would panic on
// or that no correct peer sends, judged on the message alone.
func checkMessage(m *raftpb.Message, self uint64) error {
	typ := m.GetType()
	if raft.IsLocalMsg(typ) {
		return fmt.Errorf("%w: local message type %v from the network", ErrMalformed, typ)
	}
	if m.GetFrom() == 0 || m.GetFrom() == self {
		return fmt.Errorf("%w: %v claims to come from node %d", ErrMalformed, typ, m.GetFrom())
	}
	switch typ {
	case raftpb.MsgProp, raftpb.MsgReadIndex:
		// raft forwards these to the leader as they are, and panics
		// sending one with a term ("term should not be set").
		if m.GetTerm() != 0 {
			return fmt.Errorf("%w: %v from node %d carries term %d", ErrMalformed, typ, m.GetFrom(), m.GetTerm())
		}
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap,
		raftpb.MsgVote, raftpb.MsgPreVote, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
		// Term 0 is how raft tells local messages apart; a vote answered
		// at term 0 panics ("term should be set").
		if m.GetTerm() == 0 {
			return fmt.Errorf("%w: %v from node %d without a term", ErrMalformed, typ, m.GetFrom())
		}
	}
	switch typ {
	case raftpb.MsgProp:
		if len(m.GetEntries()) == 0 {
			return fmt.Errorf("%w: empty proposal from node %d", ErrMalformed, m.GetFrom())
		}
	case raftpb.MsgReadIndex:
		// A follower forwards a read with one entry, the request context
		// the answer carries back.
		if len(m.GetEntries()) != 1 {
			return fmt.Errorf("%w: read index request from node %d with %d entries (want 1)", ErrMalformed, m.GetFrom(), len(m.GetEntries()))
		}
	case raftpb.MsgApp:
		return checkAppend(m)
	case raftpb.MsgSnap:
		return checkSnapshot(m)
	}
	return nil
}

// checkAppend refuses an append whose entries do not follow its (Index,
// LogTerm) one by one with terms that never decrease and never pass the
// message's: raft would find a "conflict with committed entry" in them.
func checkAppend(m *raftpb.Message) error {
	prevIndex, prevTerm := m.GetIndex(), m.GetLogTerm()
	if prevTerm > m.GetTerm() {
		return fmt.Errorf("%w: append from node %d at term %d follows an entry of term %d", ErrMalformed, m.GetFrom(), m.GetTerm(), prevTerm)
	}
	for i, e := range m.GetEntries() {
		if e.GetIndex() != prevIndex+1 || e.GetTerm() < prevTerm || e.GetTerm() == 0 || e.GetTerm() > m.GetTerm() {
			return fmt.Errorf("%w: append from node %d at term %d: entry %d is (index %d, term %d) after (index %d, term %d)",
				ErrMalformed, m.GetFrom(), m.GetTerm(), i, e.GetIndex(), e.GetTerm(), prevIndex, prevTerm)
		}
		if _, ok := raftpb.EntryType_name[int32(e.GetType())]; !ok {
			return fmt.Errorf("%w: append from node %d: entry %d of unknown type %d", ErrMalformed, m.GetFrom(), e.GetIndex(), e.GetType())
		}
		prevIndex, prevTerm = e.GetIndex(), e.GetTerm()
	}
	return nil
}

// checkSnapshot refuses a snapshot raft could not restore ("unable to
// restore config") or the journal could not install: its metadata names an
// index, a term no newer than the message's and a plain (non-joint)
// configuration with at least one voter, and its data is a membership blob.
func checkSnapshot(m *raftpb.Message) error {
	meta := m.GetSnapshot().GetMetadata()
	if meta.GetIndex() == 0 || meta.GetTerm() == 0 || meta.GetTerm() > m.GetTerm() {
		return fmt.Errorf("%w: snapshot from node %d at term %d names (index %d, term %d)", ErrMalformed, m.GetFrom(), m.GetTerm(), meta.GetIndex(), meta.GetTerm())
	}
	cs := meta.GetConfState()
	if len(cs.GetVotersOutgoing()) > 0 || len(cs.GetLearnersNext()) > 0 || cs.GetAutoLeave() {
		return fmt.Errorf("%w: snapshot %d from node %d holds a joint configuration", ErrMalformed, meta.GetIndex(), m.GetFrom())
	}
	if len(cs.GetVoters()) == 0 {
		return fmt.Errorf("%w: snapshot %d from node %d has no voter", ErrMalformed, meta.GetIndex(), m.GetFrom())
	}
	ids := append(slices.Clone(cs.GetVoters()), cs.GetLearners()...)
	slices.Sort(ids)
	for i, id := range ids {
		if id == 0 || (i > 0 && ids[i-1] == id) {
			return fmt.Errorf("%w: snapshot %d from node %d names node %d twice or node 0 (voters %v, learners %v)",
				ErrMalformed, meta.GetIndex(), m.GetFrom(), id, cs.GetVoters(), cs.GetLearners())
		}
	}
	if _, err := membership.Decode(m.GetSnapshot().GetData()); err != nil {
		return fmt.Errorf("snapshot %d from node %d: %w", meta.GetIndex(), m.GetFrom(), err)
	}
	return nil
}

// checkAgainstLog refuses a message that names an index beyond the end of
// this node's log where raft takes it as a fact: a heartbeat's commit
// (raft panics: "tocommit is out of range") and an append acknowledgement
// (a follower cannot have what the leader never had). lastIndex is a lower
// bound of raft's last index (see loopState.lastIndex), and what a correct
// peer sends stays within it: a leader's heartbeat carries at most what
// this node acknowledged, which it had written, and so taken from a Ready.
func checkAgainstLog(m *raftpb.Message, lastIndex uint64) error {
	switch m.GetType() {
	case raftpb.MsgHeartbeat:
		if m.GetCommit() > lastIndex {
			return fmt.Errorf("%w: heartbeat from node %d at term %d commits index %d, beyond this log's last index %d",
				ErrMalformed, m.GetFrom(), m.GetTerm(), m.GetCommit(), lastIndex)
		}
	case raftpb.MsgAppResp:
		if m.GetIndex() > lastIndex {
			return fmt.Errorf("%w: append response from node %d at term %d for index %d, beyond this log's last index %d",
				ErrMalformed, m.GetFrom(), m.GetTerm(), m.GetIndex(), lastIndex)
		}
	}
	return nil
}

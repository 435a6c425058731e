package journal

import (
	"errors"
	"fmt"
	"path/filepath"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// A data dir is initialised in an order that a crash at any step leaves
// something Open can start from, or name:
//
//  1. the Pebble log (journal/); a bootstrap writes its first entry there,
//     synced (initLog);
//  2. a join asks the helper to admit the node (idempotent: asking again
//     after a crash admits nothing twice) and writes MEMBERS;
//  3. ROLE, then VERSION (each synced, by rename). VERSION marks the dir
//     as initialised: without it Open bootstraps or joins again, over what
//     steps 1 and 2 left.
//
// On restart raft starts from the index the state machine was loaded at
// (restartPoint), never from a later one.

// initLog prepares the log before VERSION is written: a bootstrap makes its
// first entry durable, a join needs an empty log. On a restart it finishes
// a bootstrap that was interrupted after VERSION but before its first entry
// was durable.
func (j *Journal) initLog(haveVersion, bootstrap bool) error {
	empty := j.logEmpty()
	switch {
	case bootstrap:
		if !empty {
			return j.checkBootstrapLog()
		}
		return j.bootstrapLog()
	case !haveVersion:
		if !empty {
			return fmt.Errorf("journal: %s holds a journal but no VERSION file (a bootstrap that did not finish): open it with Config.Bootstrap, or empty the dir to join", j.cfg.Dir)
		}
		return nil
	}
	if !empty {
		return nil
	}
	// VERSION over an empty log: a joined node that has received nothing
	// yet has MEMBERS (written before VERSION); without it this is a
	// bootstrap whose first entry was never made durable.
	if _, err := j.cfg.FS.Stat(filepath.Join(j.cfg.Dir, datadir.MembersFile)); err == nil {
		return nil
	} else if !datadir.IsNotExist(err) {
		return operr.Errorf("journal: stat %s: %w", datadir.MembersFile, err)
	}
	if !j.cfg.Bootstrap {
		return fmt.Errorf("journal: %s has a VERSION file but an empty journal and no %s: a bootstrap that did not finish; open it with Config.Bootstrap", j.cfg.Dir, datadir.MembersFile)
	}
	return j.bootstrapLog()
}

// logEmpty reports whether the store holds no entry, HardState or snapshot.
func (j *Journal) logEmpty() bool {
	last, err := j.store.LastIndex()
	return err == nil && last == 0 && raft.IsEmptyHardState(j.store.HardState())
}

// bootstrapLog writes a new cluster's first entry, the conf change adding
// this node, committed at term 1 (what raft's Bootstrap appends), synced.
func (j *Journal) bootstrapLog() error {
	cc := &raftpb.ConfChange{
		Type:   raftpb.ConfChangeAddNode.Enum(),
		NodeId: new(j.id),
		// The first change records the cluster's dedupe window: this
		// node's, for every member and every rebuild (dedupewindow.go).
		Context: mustJSON(membership.ConfContext{Addr: j.cfg.Addr, Role: Follower, MaxVersion: j.cfg.MaxVersion, Window: j.cfg.DedupeWindow}),
	}
	data, err := proto.Marshal(cc)
	if err != nil {
		return operr.Errorf("journal: bootstrap: %w", err)
	}
	ent := &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: new(uint64(1)), Index: new(uint64(1)), Data: data}
	hs := &raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}
	if err := j.store.Append(hs, []*raftpb.Entry{ent}, nil, true); err != nil {
		return operr.Errorf("journal: bootstrap: write the first entry: %w", err)
	}
	return nil
}

// checkBootstrapLog accepts the log of a dir without VERSION under
// Config.Bootstrap only if it is what bootstrapLog wrote for this node.
func (j *Journal) checkBootstrapLog() error {
	ents, err := j.store.Entries(1, 2, 1<<20)
	if err == nil && len(ents) == 1 {
		if cc, _, err := membership.DecodeConfChange(ents[0]); err == nil &&
			cc.GetType() == raftpb.ConfChangeAddNode && cc.GetNodeId() == j.id {
			return nil
		}
	}
	return fmt.Errorf("journal: %s holds a journal but no VERSION file, and its log is not a bootstrap of node %d: empty the dir", j.cfg.Dir, j.id)
}

// restartPoint makes raft restart from the index the state machine holds
// (j.applied, set by loadState; the image may be older than raft's
// snapshot when the newest image was unusable) and returns the ConfState as
// of that index, which raft must start from. The membership as of that
// index becomes the base the replayed membership changes apply to
// (j.loop.confBase), so that the replay reproduces each historical
// record. Every entry up to the loaded index was applied, hence committed:
// when the durable commit lags (a crash between an image and the
// HardState write), it is raised to that index.
func (j *Journal) restartPoint(image *membership.Membership) (*raftpb.ConfState, error) {
	index := j.applied.Load()
	first, err := j.store.FirstIndex()
	if err != nil {
		return nil, operr.Errorf("journal: first index: %w", err)
	}
	last, err := j.store.LastIndex()
	if err != nil {
		return nil, operr.Errorf("journal: last index: %w", err)
	}
	if index+1 < first {
		return nil, operr.Errorf("journal: %w: the state was loaded at index %d, but the log starts at %d", ErrCompacted, index, first)
	}
	if index > last {
		return nil, fmt.Errorf("journal: the state was loaded at index %d, past the log's last entry %d: the log lost entries the state holds", index, last)
	}
	if hs := j.store.HardState(); index > hs.GetCommit() {
		hs.Commit = new(index)
		if err := j.store.Append(hs, nil, nil, true); err != nil {
			return nil, operr.Errorf("journal: raise the durable commit to the image %d: %w", index, err)
		}
	}
	conf, err := j.confStateAt(index, image)
	if err != nil {
		return nil, operr.Errorf("journal: configuration as of the loaded index %d: %w", index, err)
	}
	base, err := j.membershipAt(index, image)
	if err != nil {
		return nil, operr.Errorf("journal: membership as of the loaded index %d: %w", index, err)
	}
	j.loop.confBase = base
	return conf, nil
}

// membershipAt returns the membership as of index (without dedupe keys):
// the image's loaded there, the store's snapshot's when it is at index, or
// the newest membership record the store kept at or before index. At index
// 0 it is the empty membership the log's first entry applies to.
func (j *Journal) membershipAt(index uint64, image *membership.Membership) (*membership.Membership, error) {
	if image != nil {
		return image.Clone(), nil
	}
	if index == 0 {
		return membership.New(), nil
	}
	if snap, err := j.store.Snapshot(); err == nil && snap.GetMetadata().GetIndex() == index {
		m, err := membership.Decode(snap.GetData())
		if err != nil {
			return nil, err
		}
		m.Index = index
		return m.Clone(), nil
	}
	blob, err := j.store.MembershipAt(index)
	if errors.Is(err, raftstore.ErrNoMembership) {
		return nil, errors.New("no membership record at or before it")
	}
	if err != nil {
		return nil, err
	}
	m, err := membership.Decode(blob)
	if err != nil {
		return nil, err
	}
	return m.Clone(), nil
}

// confStateAt returns raft's ConfState as of index: from the image loaded
// there, from the store's snapshot when it is at index, or from the newest
// membership record the store kept at or before index.
func (j *Journal) confStateAt(index uint64, image *membership.Membership) (*raftpb.ConfState, error) {
	if image != nil {
		return image.ConfState(), nil
	}
	if index == 0 {
		return &raftpb.ConfState{}, nil
	}
	if snap, err := j.store.Snapshot(); err == nil && snap.GetMetadata().GetIndex() == index {
		return snap.GetMetadata().GetConfState(), nil
	}
	blob, err := j.store.MembershipAt(index)
	if errors.Is(err, raftstore.ErrNoMembership) {
		return nil, errors.New("no membership record at or before it")
	}
	if err != nil {
		return nil, err
	}
	m, err := membership.Decode(blob)
	if err != nil {
		return nil, err
	}
	return m.ConfState(), nil
}

package offline

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/internal/operr"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// A new cluster can start from an image instead of from an empty log (a
// restore): its log begins right after the image, as a node's does after it
// installed a snapshot. raft's snapshot and truncation point are the
// image's (index, term), the durable commit is the image's index, and the
// membership as of it names the new node alone. journal.Open then restarts
// the node as it restarts any other: it loads the image, raft starts from
// its index, and every replica that joins later, every restart and every
// checkpoint sees the state the image holds followed by the log, exactly as
// if the log before it had been replayed.

// SeedConfig describes a data dir that Seed prepares.
type SeedConfig struct {
	// FS is the filesystem (default: the OS, vfs.Default).
	FS vfs.FS
	// Dir is the data dir. It must hold no VERSION file and no journal.
	Dir string
	// ID and Addr are the new cluster's first node, its only voter.
	ID   uint64
	Addr string
	// ClusterID is the new cluster's id (the image must carry the same).
	// Token is its join token (empty: none).
	ClusterID string
	Token     string
	// Index and Term are the image's: its index becomes the log's
	// truncation point, the first entry is Index+1.
	Index, Term uint64
	// Membership is the blob the image carries, from NewClusterMembership.
	Membership []byte
}

// NewClusterMembership returns the membership blob of an image that a new
// cluster starts from: node id at addr is its only voter, as of index. From
// the old image's blob (oldMembership; nil: none) it keeps the idempotency
// keys of the dedupe window, so that a client retrying a write across the
// restore is not applied twice, the cluster's dedupe window, which decides
// what those keys' retries do, and the cluster version, which never goes
// down (the image may hold state of that format), and the clusters it
// replaced, to which it adds oldCluster (the image's cluster id; "":
// none): the new cluster replaces them (membership.Replaced), and workers
// that follow one of them move to it. Every other member the
// old blob names, and every id it removed, is removed in the new one: a
// node of the old cluster that comes back (with the same cluster id and
// token, when the caller keeps them) is refused as any removed member is,
// and its id is never reused.
func NewClusterMembership(oldMembership []byte, oldCluster string, index, id uint64, addr string) ([]byte, error) {
	if id == 0 || addr == "" || index == 0 {
		return nil, errors.New("journal: new cluster membership: id, addr and a non-zero index are required")
	}
	m := membership.New()
	if len(oldMembership) > 0 {
		old, err := membership.Decode(oldMembership)
		if err != nil {
			return nil, operr.Errorf("journal: new cluster membership: the image's: %w", err)
		}
		m.Keys = old.Keys
		m.Version = old.Version
		m.Window = old.Window
		m.Replaced = old.Replaced
		gone := slices.Concat(old.Removed, old.Voters, old.Learner, slices.Collect(maps.Keys(old.Members)))
		slices.Sort(gone)
		for _, g := range slices.Compact(gone) {
			if g != id {
				m.Removed = append(m.Removed, g)
			}
		}
	}
	if oldCluster != "" {
		m.Replaced = append(slices.DeleteFunc(slices.Clone(m.Replaced), func(c string) bool { return c == oldCluster }), oldCluster)
		m.Replaced = m.Replaced[max(0, len(m.Replaced)-membership.MaxReplaced):]
	}
	m.Index = index
	m.Voters = []uint64{id}
	m.Members[id] = journal.Member{ID: id, Addr: addr, Role: journal.Follower}
	return m.Encode(), nil
}

// Seed writes the journal part of a data dir from which journal.Open starts
// node cfg.ID as the only voter of a new cluster whose state is the image
// at cfg.Index: the Pebble log (raft's snapshot and truncation point at the
// image, the HardState committing it, the membership record), MEMBERS,
// ROLE, and VERSION last, each synced. The caller writes the image into
// Dir/image first; journal.Open refuses to start without it. A crash before
// VERSION leaves a dir that journal.Open refuses ("a journal but no
// VERSION"): build the dir aside and rename it into place to make the whole
// restore atomic.
func Seed(cfg SeedConfig) error {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	switch {
	case cfg.Dir == "" || cfg.ID == 0 || cfg.Addr == "" || cfg.ClusterID == "":
		return errors.New("journal: seed: Dir, ID, Addr and ClusterID are required")
	case cfg.Index == 0 || cfg.Term == 0:
		return fmt.Errorf("journal: seed: the image's index (%d) and term (%d) must be non-zero", cfg.Index, cfg.Term)
	}
	m, err := membership.Decode(cfg.Membership)
	if err != nil {
		return operr.Errorf("journal: seed: %w", err)
	}
	if m.Index != cfg.Index || len(m.Voters) != 1 || m.Voters[0] != cfg.ID || len(m.Learner) != 0 {
		return fmt.Errorf("journal: seed: the membership must name node %d alone as of index %d (use NewClusterMembership)", cfg.ID, cfg.Index)
	}
	if _, ok, err := datadir.ReadKV(cfg.FS, filepath.Join(cfg.Dir, datadir.VersionFile)); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("journal: seed: %s already holds a VERSION file", cfg.Dir)
	}
	if err := durable.MkdirAll(cfg.FS, cfg.Dir); err != nil {
		return operr.Errorf("journal: seed: create %s: %w", cfg.Dir, err)
	}
	store, err := raftstore.Open(raftstore.Options{FS: cfg.FS, Dir: filepath.Join(cfg.Dir, "journal")})
	if err != nil {
		return operr.Errorf("journal: seed: %w", err)
	}
	defer store.Close()
	if last, err := store.LastIndex(); err != nil || last != 0 {
		return fmt.Errorf("journal: seed: %s already holds a journal (last index %d)", cfg.Dir, last)
	}
	// The record first, unsynced: the synced Append after it carries it to
	// disk (one Pebble WAL, in order).
	if err := store.SaveMembership(cfg.Index, cfg.Membership); err != nil {
		return operr.Errorf("journal: seed: %w", err)
	}
	snap := raftpb.EnsureSnapshot(&raftpb.Snapshot{
		Data:     cfg.Membership,
		Metadata: &raftpb.SnapshotMetadata{Index: new(cfg.Index), Term: new(cfg.Term), ConfState: m.ConfState()},
	})
	hs := &raftpb.HardState{Term: new(cfg.Term), Commit: new(cfg.Index)}
	if err := store.Append(hs, nil, snap, true); err != nil {
		return operr.Errorf("journal: seed: write the log's start at %d: %w", cfg.Index, err)
	}
	if err := store.Close(); err != nil {
		return operr.Errorf("journal: seed: %w", err)
	}
	if err := datadir.WriteMembers(cfg.FS, cfg.Dir, m); err != nil {
		return err
	}
	if err := datadir.WriteRole(cfg.FS, cfg.Dir, journal.Follower); err != nil {
		return err
	}
	return datadir.WriteVersion(cfg.FS, cfg.Dir, cfg.ClusterID, cfg.Token, cfg.ID)
}

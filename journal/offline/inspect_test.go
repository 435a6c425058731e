package offline_test

import (
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/offline"
)

// seedDir seeds /n1 on a new in-memory filesystem: node 1 alone, from an
// image at index 40 of term 7.
func seedDir(t *testing.T) vfs.FS {
	t.Helper()
	fs := vfs.NewMem()
	blob, err := offline.NewClusterMembership(nil, "", 40, 1, "n1")
	require.NoError(t, err)
	require.NoError(t, offline.Seed(offline.SeedConfig{FS: fs, Dir: "/n1", ID: 1, Addr: "n1", ClusterID: "c1", Token: "t",
		Index: 40, Term: 7, Membership: blob}))
	return fs
}

// A seeded dir reads back as Seed describes it: the log starts after the
// image, which raft's snapshot and the durable commit name, node 1 is its
// only voter, and nothing is wrong with it.
func TestInspectReadsWhatSeedWrote(t *testing.T) {
	fs := seedDir(t)
	in, err := offline.Inspect("/n1", offline.InspectOptions{FS: fs})
	require.NoError(t, err)
	defer func() { require.NoError(t, in.Close()) }()
	require.Equal(t, offline.DirStatus{
		ClusterID: "c1", NodeID: 1, Role: journal.Follower,
		FirstIndex: 41, LastIndex: 40,
		Term: 7, Commit: 40,
		SnapshotIndex: 40, SnapshotTerm: 7,
		MembershipIndex: 40, Voters: []uint64{1},
		Members: []journal.Member{{ID: 1, Addr: "n1", Role: journal.Follower}},
	}, in.Status())
	require.Empty(t, in.Problems())
	n := 0
	require.NoError(t, in.Entries(1, ^uint64(0), func(offline.Entry) error { n++; return nil }))
	require.Zero(t, n, "the log holds no entry after the image")
}

// Seed refuses a dir that already holds a journal's VERSION, and a
// membership that does not name the node alone at the image's index.
func TestSeedRefusesADirInUseAndAForeignMembership(t *testing.T) {
	fs := seedDir(t)
	blob, err := offline.NewClusterMembership(nil, "", 40, 1, "n1")
	require.NoError(t, err)
	err = offline.Seed(offline.SeedConfig{FS: fs, Dir: "/n1", ID: 1, Addr: "n1", ClusterID: "c1", Index: 40, Term: 7, Membership: blob})
	require.ErrorContains(t, err, "already holds a VERSION file")
	err = offline.Seed(offline.SeedConfig{FS: fs, Dir: "/n2", ID: 2, Addr: "n2", ClusterID: "c1", Index: 40, Term: 7, Membership: blob})
	require.ErrorContains(t, err, "must name node 2 alone")
	_, err = fs.Stat(filepath.Join("/n2", "VERSION"))
	require.Error(t, err, "a refused seed writes nothing")
}

// A dir whose LOCK a node holds is refused.
func TestInspectRefusesALockedDir(t *testing.T) {
	fs := seedDir(t)
	lock, err := fs.Lock("/n1/LOCK")
	require.NoError(t, err)
	defer lock.Close()
	_, err = offline.Inspect("/n1", offline.InspectOptions{FS: fs})
	require.ErrorIs(t, err, journal.ErrLocked)
}

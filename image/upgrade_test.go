package image

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

// versionedCluster is an imageCluster whose nodes each read the formats up
// to a version the test sets per node id (default the newest), in their
// next start: an older node is one whose catalog and journal both stop at
// that version, as a binary of that version would. catalogMax alone makes
// a catalog older than its journal says (a host that did not tell it).
type versionedCluster struct {
	*imageCluster
	mu         sync.Mutex
	maxV       map[uint64]int
	catalogMax map[uint64]int
}

func newVersionedCluster(t *testing.T, maxV, catalogMax map[uint64]int) *versionedCluster {
	vc := &versionedCluster{maxV: maxV, catalogMax: catalogMax}
	vc.imageCluster = newImageCluster(t, func(cfg *journal.Config) {
		vc.mu.Lock()
		v, ok := vc.maxV[cfg.ID]
		cv, cok := vc.catalogMax[cfg.ID]
		vc.mu.Unlock()
		if !ok {
			// The tests upgrade from format 1 to format 2, where the
			// journal and batch versions coincide.
			v = catalog.BatchV2
		}
		if !cok {
			cv = v
		}
		cfg.StateMachine.(*catalog.Tree).LimitFormat(cv)
		cfg.MaxVersion = uint32(v)
	})
	return vc
}

func (vc *versionedCluster) setMax(id uint64, v int) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.maxV[id] = v
}

func (vc *versionedCluster) setCatalogMax(id uint64, v int) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.catalogMax[id] = v
}

// write encodes b as a writer does, in the cluster version the node j
// knows, and proposes it through j.
func write(ctx context.Context, t *testing.T, j *journal.Journal, b catalog.Batch) (uint64, error) {
	t.Helper()
	data, err := b.EncodeVersion(int(j.ClusterVersion()))
	if err != nil {
		return 0, err
	}
	idx, v, err := j.Propose(ctx, data)
	if err != nil {
		return 0, err
	}
	if res := v.(*catalog.Result); res.Err != nil {
		return idx, res.Err
	}
	return idx, nil
}

// entryVersions returns the batch format version of every catalog entry
// in (after, upTo] on j.
func entryVersions(ctx context.Context, t *testing.T, j *journal.Journal, after, upTo uint64) map[byte]int {
	t.Helper()
	out := map[byte]int{}
	require.NoError(t, j.ReadEntries(ctx, after, upTo, func(_ uint64, data []byte) error {
		out[data[0]]++
		return nil
	}))
	return out
}

// requireSameCatalogs checks that every running node applied up to index
// and holds a catalog that saves byte for byte as the first one's.
func (vc *versionedCluster) requireSameCatalogs(ctx context.Context, index uint64) {
	vc.t.Helper()
	var first []byte
	for _, n := range vc.Running() {
		require.NoError(vc.t, n.Journal().WaitApplied(ctx, index))
		b := saveBytes(vc.t, vc.tree(n.ID))
		if first == nil {
			first = b
			continue
		}
		require.Equal(vc.t, first, b, "node %d's catalog", n.ID)
	}
}

// A rolling upgrade in one process. While a node that reads only version 1
// is a member, the cluster version stays 1, writers write version 1 (a
// batch that needs version 2 is refused before it is proposed) and every
// node holds the same catalog. Once the old node is replaced by a new one,
// the cluster version rises to 2 on every node and version 2 entries
// appear; from then on a node that reads only version 1 cannot join, and a
// member cannot restart as one (a downgrade below the cluster version).
func TestRollingUpgradeRaisesClusterVersion(t *testing.T) {
	vc := newVersionedCluster(t, map[uint64]int{1: catalog.BatchV1}, map[uint64]int{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := vc.WaitLeader(ctx)
	require.NoError(t, err)
	// A new node leads (it reads version 2 and would write it), so that the
	// gate, not the leader's own maximum, keeps the cluster at 1. It raises
	// the version, if at all, as it takes over: before the writes below.
	if leaderID == 1 {
		require.NoError(t, vc.Node(1).Journal().TransferLeadership(ctx, 2))
		leaderID = 2
	}
	lj := vc.Node(leaderID).Journal()

	job := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/job", Kind: "job", Set: map[string]catalog.Value{"state": catalog.String("running")}}}}
	_, err = write(ctx, t, lj, job)
	require.NoError(t, err)
	var last uint64
	for _, b := range catalogBatches(t, 40) {
		last, _, err = lj.Propose(ctx, b)
		require.NoError(t, err)
	}
	done := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpUpdate, Path: "/job",
		Cond: catalog.Cond{Match: map[string]catalog.Value{"state": catalog.String("running")}},
		Set:  map[string]catalog.Value{"state": catalog.String("done")}}}}
	_, err = write(ctx, t, lj, done)
	require.ErrorIs(t, err, catalog.ErrUnsupportedVersion, "version 2 is not written while a version 1 node is a member")
	vc.requireSameCatalogs(ctx, last)
	for _, n := range vc.Running() {
		require.Equal(t, uint32(1), n.Journal().Status().ClusterVersion, "node %d", n.ID)
	}
	require.Equal(t, map[byte]int{catalog.BatchV1: 41}, entryVersions(ctx, t, lj, 0, last))

	// Replace node 1, the old one: a new node joins, then node 1 leaves.
	n4, err := vc.AddNode(ctx, journal.Follower)
	require.NoError(t, err)
	vc.startCheckpointer(n4.ID)
	require.Equal(t, uint32(1), vc.Node(2).Journal().ClusterVersion(), "node 1 still reads only version 1")
	require.NoError(t, lj.RemoveMember(ctx, 1, false))
	vc.crash(1, false)

	// The leader proposed the raise as it applied the removal: an entry
	// proposed after it lands after the raise.
	mark, err := write(ctx, t, lj, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCheck, Path: "/job"}}})
	require.NoError(t, err)
	vc.requireSameCatalogs(ctx, mark)
	for _, n := range vc.Running() {
		require.Equal(t, uint32(2), n.Journal().Status().ClusterVersion, "node %d", n.ID)
	}
	_, err = write(ctx, t, lj, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCheck, Path: "/job"}}})
	require.NoError(t, err)
	doneAt, err := write(ctx, t, lj, done)
	require.NoError(t, err)
	vc.requireSameCatalogs(ctx, doneAt)
	require.Equal(t, map[byte]int{catalog.BatchV2: 2}, entryVersions(ctx, t, lj, mark, doneAt), "writers write version 2")
	n, ok := vc.tree(n4.ID).Get("/job")
	require.True(t, ok)
	require.True(t, n.Attrs["state"].Equal(catalog.String("done")))

	// An old node cannot join now, nor a member restart as one.
	vc.setMax(5, catalog.BatchV1)
	_, err = vc.AddNode(ctx, journal.Follower)
	require.ErrorIs(t, err, journal.ErrVersion)
	require.ErrorContains(t, err, "cluster is at version 2")
	vc.setMax(3, catalog.BatchV1)
	vc.crash(3, false)
	err = vc.Restart(ctx, 3)
	require.ErrorIs(t, err, journal.ErrVersion)
	require.ErrorContains(t, err, "format version 2")
}

// A node handed an entry it cannot read (a version 2 batch to a catalog
// that reads only version 1, behind a journal that let the cluster reach
// version 2) halts at that entry, with the index and the version in its
// status, while the others go on; its catalog is then byte for byte what
// the log up to the entry before gives. Restarted with a catalog that reads
// version 2, it resumes at that entry and ends byte-identical to the
// others.
func TestUnreadableBatchHaltsNodeUntilRestart(t *testing.T) {
	const old = 3
	vc := newVersionedCluster(t, map[uint64]int{}, map[uint64]int{old: catalog.BatchV1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := vc.WaitLeader(ctx)
	require.NoError(t, err)
	if leaderID == old {
		require.NoError(t, vc.Node(old).Journal().TransferLeadership(ctx, 1))
		leaderID = 1
	}
	lj := vc.Node(leaderID).Journal()
	// Encode writes version 1 while nothing needs 2: node 3 reads these.
	create, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/job", Kind: "job",
		Set: map[string]catalog.Value{"state": catalog.String("running")}}}}.Encode()
	require.NoError(t, err)
	_, _, err = lj.Propose(ctx, create)
	require.NoError(t, err)
	for _, b := range catalogBatches(t, 30) {
		_, _, err = lj.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.Equal(t, uint32(2), lj.ClusterVersion())
	newer, err := write(ctx, t, lj, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpUpdate, Path: "/job",
		Cond: catalog.Cond{Match: map[string]catalog.Value{"state": catalog.String("running")}},
		Set:  map[string]catalog.Value{"state": catalog.String("done")}}}})
	require.NoError(t, err)
	var last uint64
	for _, b := range catalogBatches(t, 60)[30:] {
		last, _, err = lj.Propose(ctx, b)
		require.NoError(t, err)
	}

	oj := vc.Node(old).Journal()
	err = oj.WaitApplied(ctx, last)
	require.ErrorIs(t, err, journal.ErrHalted)
	require.ErrorIs(t, err, catalog.ErrUnknownVersion)
	var he *journal.HaltError
	require.ErrorAs(t, err, &he)
	require.Equal(t, newer, he.Index)
	require.ErrorContains(t, err, "batch version 2")
	st := oj.Status()
	require.ErrorIs(t, st.Err, journal.ErrHalted)
	require.Equal(t, newer-1, st.Applied)
	require.Equal(t, newer-1, vc.tree(old).Index(), "the catalog did not move past the entry before")

	// Its catalog is the log's up to the entry before, byte for byte.
	shadow := catalog.New()
	require.NoError(t, lj.ReadEntries(ctx, 0, newer-1, func(i uint64, data []byte) error {
		if res := shadow.Apply(i, data).(*catalog.Result); res.Halt() != nil {
			return res.Halt()
		}
		return nil
	}))
	require.Equal(t, saveBytes(t, shadow), saveBytes(t, vc.tree(old)))
	// Its own image is written at that index, from that catalog.
	info, err := vc.cps[old].Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, newer-1, info.Index)

	vc.setCatalogMax(old, catalog.BatchV2)
	vc.crash(old, false)
	require.NoError(t, vc.Restart(ctx, old))
	vc.startCheckpointer(old)
	vc.requireSameCatalogs(ctx, last)
	n, ok := vc.tree(old).Get("/job")
	require.True(t, ok)
	require.True(t, n.Attrs["state"].Equal(catalog.String("done")))
}

// An upgrade in place: every node restarted, one at a time, on its own
// data dir with a binary that reads version 2. Each advertises what it now
// reads; the cluster version rises once the last one has, and not before a
// rollback of one node (to version 1, while the cluster is still at 1)
// is undone. After the raise a node cannot be rolled back: it refuses to
// start.
func TestInPlaceUpgradeAndRollback(t *testing.T) {
	vc := newVersionedCluster(t, map[uint64]int{1: catalog.BatchV1, 2: catalog.BatchV1, 3: catalog.BatchV1}, map[uint64]int{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := vc.WaitLeader(ctx)
	require.NoError(t, err)
	restart := func(id uint64, v int) error {
		vc.setMax(id, v)
		vc.crash(id, false)
		if err := vc.Restart(ctx, id); err != nil {
			return err
		}
		vc.startCheckpointer(id)
		return nil
	}
	anyJournal := func() *journal.Journal {
		for _, n := range vc.Running() {
			return n.Journal()
		}
		return nil
	}
	var last uint64
	batches := catalogBatches(t, 40)
	for _, b := range batches[:20] {
		last, _, err = anyJournal().Propose(ctx, b)
		require.NoError(t, err)
	}

	// Node 3 is upgraded and rolled back while the cluster is at 1.
	require.NoError(t, restart(3, catalog.BatchV2))
	require.NoError(t, restart(3, catalog.BatchV1))
	require.NoError(t, vc.Node(3).Journal().WaitApplied(ctx, last))
	for _, id := range []uint64{1, 2, 3} {
		require.NoError(t, restart(id, catalog.BatchV2))
	}
	for _, n := range vc.Running() {
		require.NoError(t, n.Journal().WaitClusterVersion(ctx, 2), "node %d", n.ID)
	}
	for _, m := range anyJournal().Status().Members {
		require.Equal(t, uint32(2), m.MaxVersion, "member %d advertised", m.ID)
	}
	for _, b := range batches[20:] {
		last, err = write(ctx, t, anyJournal(), mustDecode(t, b))
		var oe *catalog.OpError
		if err != nil {
			require.ErrorAs(t, err, &oe, "only the batches made to fail fail") // applied as no-ops
		}
	}
	vc.requireSameCatalogs(ctx, last)
	require.Equal(t, 20, entryVersions(ctx, t, anyJournal(), last-20, last)[catalog.BatchV2])

	err = restart(1, catalog.BatchV1)
	require.ErrorIs(t, err, journal.ErrVersion)
	require.ErrorContains(t, err, "never goes down")
}

func mustDecode(t *testing.T, data []byte) catalog.Batch {
	t.Helper()
	b, err := catalog.DecodeBatch(data)
	require.NoError(t, err)
	return b
}

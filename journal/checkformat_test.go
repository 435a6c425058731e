package journal_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
	"github.com/metatree/metatree/journal/offline"
)

// formatTree is a catalog that records the digest formats the journal
// asks it for at the check marks, in order.
type formatTree struct {
	*catalog.Tree
	mu    sync.Mutex
	asked []int
}

func (f *formatTree) StateDigestOf(format int) []byte {
	f.mu.Lock()
	f.asked = append(f.asked, format)
	f.mu.Unlock()
	return f.Tree.StateDigestOf(format)
}

func (f *formatTree) formats() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

var _ journal.FormatDigester = (*formatTree)(nil)

// During a rolling upgrade from binaries that read format versions up to
// 4, a member still at version 4 keeps the cluster at version 4: the
// marks name digest format 1, which every member computes, and no alarm
// is raised. Once the last member runs a binary of version 5 the cluster
// version rises, the marks name format 2 from then on, every member
// switches to it once (never back), and the checks still agree.
func TestDigestFormatSwitchesOnceTheClusterVersionReadsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var upgraded [4]atomic.Bool
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(uint64) journal.StateMachine { return &formatTree{Tree: catalog.New()} },
			Configure: func(cfg *journal.Config) {
				cfg.MaxVersion = 4
				if upgraded[cfg.ID].Load() {
					cfg.MaxVersion = 5
				}
			},
		})
		ctx := ctxFor(t, 120*time.Second)
		via := func() *journaltest.Node {
			l, err := c.WaitLeader(ctx)
			require.NoError(t, err)
			return c.Node(l)
		}
		upgrade := func(id uint64) {
			require.NoError(t, c.Stop(id))
			upgraded[id].Store(true)
			require.NoError(t, c.Restart(ctx, id))
		}
		formats := func(n *journaltest.Node) []int {
			return slices.Compact(n.StateMachine().(*formatTree).formats())
		}
		runFor(ctx, t, via, 3*checkInterval)
		// Two of three upgraded: node 3 still reads up to version 4.
		upgrade(1)
		upgrade(2)
		runFor(ctx, t, via, 4*checkInterval)
		requireNoAlarm(t, c)
		checks := map[uint64]float64{}
		for _, n := range c.Running() {
			require.Equal(t, uint32(4), n.Journal().Status().ClusterVersion, "node %d", n.ID)
			require.Equal(t, []int{1}, formats(n), "node %d: a cluster at version 4 compares format 1", n.ID)
			checks[n.ID] = metricsOf(t, n)["metatree_journal_consistency_checks_total"]
			require.GreaterOrEqual(t, checks[n.ID], 2.0, "node %d", n.ID)
		}

		// The last member is upgraded: the cluster version rises to 5.
		upgrade(3)
		require.NoError(t, via().Journal().WaitClusterVersion(ctx, 5))
		runFor(ctx, t, via, 4*checkInterval)
		requireNoAlarm(t, c)
		for _, n := range c.Running() {
			require.Equal(t, uint32(5), n.Journal().Status().ClusterVersion, "node %d", n.ID)
			// A restarted member replays the marks from the start of the log.
			require.Equal(t, []int{1, 2}, formats(n), "node %d: format 1, then format 2 for good", n.ID)
			m := metricsOf(t, n)["metatree_journal_consistency_checks_total"]
			if n.ID != 3 {
				require.GreaterOrEqual(t, m, checks[n.ID]+2, "node %d compares format 2 digests", n.ID)
			}
			_, d := n.StateMachine().(*formatTree).Digest()
			require.Equal(t, catalog.DigestV2, d.Format())
		}
	})
}

// A log written across the rolling upgrade holds marks of both digest
// formats; the offline check (offline.Inspector.VerifyDigests) replays it and
// compares at the marks of each in its format, and finds a catalog that
// differs at the first, a format 1 mark.
func TestVerifyDigestsComparesAtTheMarksOfEachFormat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var upgraded [4]atomic.Bool
		var mu sync.Mutex
		var dir string
		var fs vfs.FS
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(uint64) journal.StateMachine { return catalog.New() },
			Configure: func(cfg *journal.Config) {
				if !upgraded[cfg.ID].Load() {
					cfg.MaxVersion = 4
				}
				if cfg.ID == 1 {
					mu.Lock()
					dir, fs = cfg.Dir, cfg.FS
					mu.Unlock()
				}
			},
		})
		ctx := ctxFor(t, 120*time.Second)
		via := func() *journaltest.Node {
			l, err := c.WaitLeader(ctx)
			require.NoError(t, err)
			return c.Node(l)
		}
		runFor(ctx, t, via, 3*checkInterval)
		for id := uint64(1); id <= 3; id++ {
			require.NoError(t, c.Stop(id))
			upgraded[id].Store(true)
			require.NoError(t, c.Restart(ctx, id))
		}
		require.NoError(t, via().Journal().WaitClusterVersion(ctx, 5))
		runFor(ctx, t, via, 3*checkInterval)
		requireNoAlarm(t, c)
		c.Close()

		mu.Lock()
		in, err := offline.Inspect(dir, offline.InspectOptions{FS: fs})
		mu.Unlock()
		require.NoError(t, err)
		defer func() { require.NoError(t, in.Close()) }()
		marks := map[int][]uint64{}
		require.NoError(t, in.Entries(1, ^uint64(0), func(e offline.Entry) error {
			if e.Kind == offline.KindCheckMark {
				marks[e.DigestFormat] = append(marks[e.DigestFormat], e.Index)
			}
			return nil
		}))
		require.NotEmpty(t, marks[1], "marks of format 1 before the upgrade")
		require.NotEmpty(t, marks[2], "marks of format 2 after it")
		require.Less(t, slices.Max(marks[1]), slices.Min(marks[2]), "format 2 for good once it starts")

		res, err := in.VerifyDigests(ctx, catalog.New(), 0, nil, 0)
		require.NoError(t, err)
		compared := map[int]int{}
		for _, m := range res.Compared {
			for f, idx := range marks {
				if slices.Contains(idx, m) {
					compared[f]++
				}
			}
		}
		require.Positive(t, compared[1], "marks of format 1 compared: %+v", res)
		require.Positive(t, compared[2], "marks of format 2 compared: %+v", res)

		bad := catalog.New()
		require.NoError(t, catalogtest.SetAttr(bad, "/", "x", catalog.Int(1)))
		_, err = in.VerifyDigests(ctx, bad, 0, nil, 0)
		var ce *journal.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, 1, ce.Format)
		require.Equal(t, slices.Min(marks[1]), ce.Index)
	})
}

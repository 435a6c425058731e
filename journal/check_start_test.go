package journal_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A restarted member serves no reads until a comparison at a mark after
// its start confirmed the state it replayed: until then CheckFresh fails
// (ErrStale, naming the check) and ReadBarrier waits; the first mark after
// the restart ends the wait. The members that did not restart serve all
// along.
func TestRestartedMemberServesReadsOnlyAfterTheCheckAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(uint64) journal.StateMachine { return catalog.New() },
			Configure:       func(cfg *journal.Config) { cfg.CheckInterval = interval },
		})
		ctx := ctxFor(t, 120*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		ln := c.Node(leader)
		idx := writeBatch(ctx, t, ln, catalog.Op{Type: catalog.OpCreate, Path: "/db", Kind: "database"})
		require.NoError(t, c.WaitApplied(ctx, idx))

		f := leader%3 + 1
		require.NoError(t, c.Stop(f))
		require.NoError(t, c.Restart(ctx, f))
		fj := c.Node(f).Journal()
		require.NoError(t, fj.WaitApplied(ctx, idx))
		require.ErrorIs(t, fj.CheckFresh(), journal.ErrStale)
		require.ErrorContains(t, fj.CheckFresh(), "consistency check at start")
		short, cancel := context.WithTimeout(ctx, time.Second)
		err = fj.ReadBarrier(short)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, journal.ErrStale, "the wait names the check at start")
		require.NoError(t, ln.Journal().ReadBarrier(ctx), "the leader did not restart")

		// The leader's first mark (one interval after it took the lead)
		// confirms the restarted member's state.
		start := time.Now()
		require.NoError(t, fj.ReadBarrier(ctx))
		require.NoError(t, fj.CheckFresh())
		require.LessOrEqual(t, time.Since(start), interval+time.Second)
		require.NoError(t, fj.Status().Err)
	})
}

// The check at start never holds a member back in a cluster that cannot
// check: a sole voter (no one to compare with), a state machine that
// states no digest, and a cluster below format version 3 (no marks; the
// version may rise later, during a rolling upgrade).
func TestCheckAtStartDoesNotWaitWhereNoCheckCanRun(t *testing.T) {
	tree := func(uint64) journal.StateMachine { return catalog.New() }
	for name, tc := range map[string]struct {
		opts       journaltest.Options
		maxVersion uint32
	}{
		"sole voter":        {opts: journaltest.Options{Voters: 1, NewStateMachine: tree}},
		"no digest":         {},
		"cluster version 2": {opts: journaltest.Options{NewStateMachine: tree}, maxVersion: 2},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := tc.opts
				opts.Configure = func(cfg *journal.Config) {
					if tc.maxVersion != 0 {
						cfg.MaxVersion = tc.maxVersion
					} else {
						cfg.CheckInterval = time.Hour // no mark comes in this test
					}
				}
				c := journaltest.NewCluster(t, opts)
				ctx := ctxFor(t, 60*time.Second)
				leader, err := c.WaitLeader(ctx)
				require.NoError(t, err)
				idx, _, err := c.Node(leader).Journal().Propose(ctx, encodeAny(t, opts))
				require.NoError(t, err)
				require.NoError(t, c.WaitApplied(ctx, idx))
				id := uint64(len(c.Nodes()))
				require.NoError(t, c.Stop(id))
				require.NoError(t, c.Restart(ctx, id))
				short, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				require.NoError(t, c.Node(id).Journal().ReadBarrier(short))
				if tc.maxVersion != 0 {
					require.Equal(t, tc.maxVersion, c.Node(id).Journal().Status().ClusterVersion)
				}
			})
		})
	}
}

// encodeAny is a user entry the cluster's state machine applies: a catalog
// batch for a catalog, any bytes for the default recorder.
func encodeAny(t *testing.T, opts journaltest.Options) []byte {
	if opts.NewStateMachine == nil {
		return []byte("x")
	}
	data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/x", Kind: "dir"}}}.Encode()
	require.NoError(t, err)
	return data
}

// When the three voters' catalogs all differ, no digest has a majority:
// no member is singled out (none raises its own alarm, none stops), every
// member shows the alarm naming every voter, writes stop cluster-wide
// with ErrCorrupt (at the leader and through a follower), and ClearAlarm
// lets writes go on again.
func TestNoMajorityStopsWritesClusterWideUntilCleared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTreeCluster(t)
		ctx := ctxFor(t, 60*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		ln := c.Node(leader)
		idx := writeBatch(ctx, t, ln, catalog.Op{Type: catalog.OpCreate, Path: "/db", Kind: "database",
			Set: map[string]catalog.Value{"owner": catalog.String("ann")}})
		require.NoError(t, c.WaitApplied(ctx, idx))
		a, b := c.Node(leader%3+1), c.Node((leader+1)%3+1)
		require.NoError(t, catalogtest.SetAttr(a.StateMachine().(*catalog.Tree), "/db", "owner", catalog.String("bob")))
		require.NoError(t, catalogtest.SetAttr(b.StateMachine().(*catalog.Tree), "/db", "owner", catalog.String("cy")))

		for _, n := range c.Nodes() {
			awaitAlarm(ctx, t, n)
			al := n.Journal().Status().Alarm
			require.True(t, al.NoMajority, "node %d", n.ID)
			require.Equal(t, []uint64{1, 2, 3}, al.Members, "node %d", n.ID)
		}
		data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/refused", Kind: "dir"}}}.Encode()
		require.NoError(t, err)
		for _, n := range c.Nodes() {
			require.NoError(t, n.Journal().Status().Err, "node %d raised no alarm of its own", n.ID)
			_, _, err := n.Journal().Propose(ctx, data)
			require.ErrorIs(t, err, journal.ErrCorrupt, "node %d", n.ID)
		}

		// The way out: the members that differ are repaired, then the
		// alarm is cleared. A check whose mark was journaled before the
		// repair may still complete after the clear and raise the alarm
		// again (its digests differ): the operator clears again, and once
		// every check in flight has completed, writes go on.
		require.NoError(t, catalogtest.SetAttr(a.StateMachine().(*catalog.Tree), "/db", "owner", catalog.String("ann")))
		require.NoError(t, catalogtest.SetAttr(b.StateMachine().(*catalog.Tree), "/db", "owner", catalog.String("ann")))
		after, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/after", Kind: "dir"}}}.Encode()
		require.NoError(t, err)
		retry := time.NewTicker(checkInterval)
		defer retry.Stop()
		for {
			require.NoError(t, a.Journal().ClearAlarm(ctx))
			next, v, err := ln.Journal().Propose(ctx, after)
			if err == nil {
				require.NoError(t, v.(*catalog.Result).Err)
				require.NoError(t, c.WaitApplied(ctx, next))
				return
			}
			require.ErrorIs(t, err, journal.ErrCorrupt)
			select {
			case <-retry.C:
			case <-ctx.Done():
				t.Fatalf("writes never went on after the alarm was cleared: %v", err)
			}
		}
	})
}

// awaitAlarm waits until node n's journal shows the cluster's alarm.
func awaitAlarm(ctx context.Context, t *testing.T, n *journaltest.Node) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n.Journal().Status().Alarm == nil {
		select {
		case <-ctx.Done():
			t.Fatalf("node %d shows no alarm: %v", n.ID, ctx.Err())
		case <-tick.C:
		}
	}
}

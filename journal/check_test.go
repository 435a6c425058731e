package journal_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// checkInterval is the consistency checks' interval in these tests: the
// default.
const checkInterval = time.Second

func newTreeCluster(t *testing.T) *journaltest.Cluster {
	return journaltest.NewCluster(t, journaltest.Options{
		NewStateMachine: func(uint64) journal.StateMachine { return catalog.New() },
	})
}

// writeBatch proposes a catalog batch through n and returns its index.
func writeBatch(ctx context.Context, t *testing.T, n *journaltest.Node, ops ...catalog.Op) uint64 {
	t.Helper()
	data, err := catalog.Batch{Ops: ops}.Encode()
	require.NoError(t, err)
	idx, v, err := n.Journal().Propose(ctx, data)
	require.NoError(t, err)
	require.NoError(t, v.(*catalog.Result).Err)
	return idx
}

// awaitCorrupt waits (in the bubble's time) until node n raises its
// corruption alarm and returns it with how long that took.
func awaitCorrupt(ctx context.Context, t *testing.T, n *journaltest.Node) (*journal.CorruptError, time.Duration) {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var ce *journal.CorruptError
		if err := n.Journal().Status().Err; errors.As(err, &ce) {
			return ce, time.Since(start)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %d raised no corruption alarm: %v", n.ID, ctx.Err())
		case <-tick.C:
		}
	}
}

// runFor lets the cluster run for d of the bubble's time, writing through
// via every 100ms, and returns the index of the last write.
func runFor(ctx context.Context, t *testing.T, via func() *journaltest.Node, d time.Duration) uint64 {
	t.Helper()
	var last uint64
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		last = writeBatch(ctx, t, via(), catalog.Op{Type: catalog.OpCreate, Path: fmt.Sprintf("/w%d-%d", time.Now().UnixNano(), i), Kind: "w",
			Set: map[string]catalog.Value{"i": catalog.Int(int64(i))}})
		timer := time.NewTimer(100 * time.Millisecond)
		<-timer.C
	}
	return last
}

func metricsOf(t *testing.T, n *journaltest.Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(n.Journal().Collector()))
	return scrape(t, reg)
}

func requireNoAlarm(t *testing.T, c *journaltest.Cluster) {
	t.Helper()
	for _, n := range c.Running() {
		require.NoError(t, n.Journal().Status().Err, "node %d", n.ID)
		m := metricsOf(t, n)
		require.Equal(t, 0.0, m["metatree_journal_corrupt"], "node %d", n.ID)
	}
}

// One attribute changed in one follower's tree (outside the log) is found
// within one check interval, on that follower only: it raises the
// corruption alarm naming the index, both digests and the agreeing
// voters, stops serving reads and applying, and the healthy majority
// goes on taking writes.
func TestConsistencyCheckFindsTheFollowerWhoseCatalogDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTreeCluster(t)
		ctx := ctxFor(t, 60*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		ln := c.Node(leader)
		idx := writeBatch(ctx, t, ln, catalog.Op{Type: catalog.OpCreate, Path: "/db", Kind: "database",
			Set: map[string]catalog.Value{"owner": catalog.String("ann")}})
		require.NoError(t, c.WaitApplied(ctx, idx))
		// Rounds run on a healthy cluster first: they match everywhere.
		runFor(ctx, t, func() *journaltest.Node { return ln }, 3*checkInterval)
		requireNoAlarm(t, c)
		for _, n := range c.Running() {
			require.GreaterOrEqual(t, metricsOf(t, n)["metatree_journal_consistency_checks_total"], 2.0, "node %d", n.ID)
		}

		bad := c.Node(leader%3 + 1)
		require.NoError(t, catalogtest.SetAttr(bad.StateMachine().(*catalog.Tree), "/db", "owner", catalog.String("bob")))
		ce, took := awaitCorrupt(ctx, t, bad)
		require.LessOrEqual(t, took, checkInterval+250*time.Millisecond, "detected within one check interval")
		require.ErrorIs(t, ce, journal.ErrCorrupt)
		require.NotEqual(t, ce.Local, ce.Majority)
		var healthy []uint64
		for _, n := range c.Nodes() {
			if n.ID != bad.ID {
				healthy = append(healthy, n.ID)
			}
		}
		require.Equal(t, healthy, ce.Agreeing)
		_, local := bad.StateMachine().(*catalog.Tree).Digest()
		require.Equal(t, local.Bytes(), ce.Local)
		_, good := ln.StateMachine().(*catalog.Tree).Digest()
		require.NotEqual(t, good, local)

		// The alarm: reads and writes refused, the metric raised.
		require.ErrorIs(t, bad.Journal().ReadBarrier(ctx), journal.ErrCorrupt)
		require.ErrorIs(t, bad.Journal().CheckFresh(), journal.ErrCorrupt)
		require.Equal(t, 1.0, metricsOf(t, bad)["metatree_journal_corrupt"])
		badApplied := bad.Journal().Status().Applied

		// The healthy majority goes on, and raises no alarm.
		next := writeBatch(ctx, t, ln, catalog.Op{Type: catalog.OpCreate, Path: "/after", Kind: "dir"})
		for _, id := range healthy {
			require.NoError(t, c.Node(id).Journal().WaitApplied(ctx, next))
			require.NoError(t, c.Node(id).Journal().Status().Err, "node %d", id)
			require.Equal(t, 0.0, metricsOf(t, c.Node(id))["metatree_journal_corrupt"], "node %d", id)
			// Every member names the one whose catalog differs.
			awaitAlarm(ctx, t, c.Node(id))
			al := c.Node(id).Journal().Status().Alarm
			require.Equal(t, []uint64{bad.ID}, al.Members, "node %d", id)
			require.False(t, al.NoMajority)
			require.NoError(t, c.Node(id).Journal().CheckFresh(), "node %d serves", id)
		}
		require.Equal(t, badApplied, bad.Journal().Status().Applied, "the corrupt member applies nothing more")
		_, ok := bad.StateMachine().(*catalog.Tree).Get("/after")
		require.False(t, ok)
	})
}

// A leader whose catalog differs finds it too, and gives way: a healthy
// member takes over and writes go on.
func TestConsistencyCheckFindsTheLeaderWhoseCatalogDiffersAndItStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTreeCluster(t)
		ctx := ctxFor(t, 60*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		ln := c.Node(leader)
		idx := writeBatch(ctx, t, ln, catalog.Op{Type: catalog.OpCreate, Path: "/db", Kind: "database",
			Set: map[string]catalog.Value{"owner": catalog.String("ann")}})
		require.NoError(t, c.WaitApplied(ctx, idx))

		require.NoError(t, catalogtest.SetAttr(ln.StateMachine().(*catalog.Tree), "/db", "owner", catalog.Int(7)))
		ce, took := awaitCorrupt(ctx, t, ln)
		require.LessOrEqual(t, took, checkInterval+250*time.Millisecond)
		require.NotContains(t, ce.Agreeing, leader)
		newLeader, err := c.WaitNewLeader(ctx, leader)
		require.NoError(t, err)
		next := writeBatch(ctx, t, c.Node(newLeader), catalog.Op{Type: catalog.OpCreate, Path: "/after", Kind: "dir"})
		for _, n := range c.Running() {
			if n.ID != leader {
				require.NoError(t, n.Journal().WaitApplied(ctx, next))
				require.NoError(t, n.Journal().Status().Err, "node %d", n.ID)
			}
		}
	})
}

// Restarts (clean and crashes, which replay the log into a fresh tree,
// marks and reports included) and a change of leader raise no alarm,
// while the checks go on comparing.
func TestConsistencyCheckRaisesNoAlarmThroughRestartsAndLeaderChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTreeCluster(t)
		ctx := ctxFor(t, 120*time.Second)
		leaderNode := func() *journaltest.Node {
			id, err := c.WaitLeader(ctx)
			require.NoError(t, err)
			return c.Node(id)
		}
		runFor(ctx, t, leaderNode, 3*checkInterval)
		requireNoAlarm(t, c)

		leader := leaderNode().ID
		follower := leader%3 + 1
		require.NoError(t, c.Stop(follower))
		runFor(ctx, t, leaderNode, 2*checkInterval)
		require.NoError(t, c.Restart(ctx, follower))
		runFor(ctx, t, leaderNode, 3*checkInterval)
		requireNoAlarm(t, c)

		require.NoError(t, c.Crash(follower))
		require.NoError(t, c.Restart(ctx, follower))
		other := slices.DeleteFunc([]uint64{1, 2, 3}, func(id uint64) bool { return id == leader || id == follower })[0]
		require.NoError(t, c.Node(leader).Journal().TransferLeadership(ctx, other))
		last := runFor(ctx, t, leaderNode, 3*checkInterval)
		require.NoError(t, c.WaitApplied(ctx, last))
		requireNoAlarm(t, c)
		for _, n := range c.Running() {
			require.GreaterOrEqual(t, metricsOf(t, n)["metatree_journal_consistency_checks_total"], 2.0, "node %d compared", n.ID)
		}
	})
}

package journaltest_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// syncCounter counts the files a node creates through its WrapFS.
type syncCounter struct {
	vfs.FS
	created *atomic.Int64
}

func (f syncCounter) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f.created.Add(1)
	return f.FS.Create(name, c)
}

// Over the HTTP transport a cluster forms on loopback ports, replicates,
// and a stopped and a crashed node come back on the same address and
// catch up; every node's files go through WrapFS.
func TestHTTPClusterStopCrashRestart(t *testing.T) {
	var created atomic.Int64
	c := journaltest.NewCluster(t, journaltest.Options{
		Transport: journaltest.HTTP,
		WrapFS:    func(_ uint64, fs vfs.FS) vfs.FS { return syncCounter{fs, &created} },
	})
	ctx := ctxFor(t, 30*time.Second)
	require.Nil(t, c.Net, "no in-memory network over HTTP")
	for _, n := range c.Nodes() {
		require.True(t, strings.HasPrefix(n.Addr, "127.0.0.1:"), "node %d serves on loopback, not %q", n.ID, n.Addr)
	}
	require.Positive(t, created.Load(), "the nodes' files go through WrapFS")

	stopCrashRestart(ctx, t, c)

	n, err := c.AddNode(ctx, journal.Observer)
	require.NoError(t, err)
	require.NoError(t, n.Journal().ReadBarrier(ctx))
	require.Contains(t, values(n), "while-crashed")
}

// Over the HTTP transport served in process a cluster forms in a synctest
// bubble, on virtual time, with no socket: it replicates, and a stopped
// and a crashed node come back on the same address and catch up.
func TestHTTPInProcessClusterStopCrashRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Transport: journaltest.HTTPInProcess})
		ctx := ctxFor(t, 30*time.Second)
		require.Nil(t, c.Net, "no in-memory network over HTTP")
		for _, n := range c.Nodes() {
			require.Equal(t, fmt.Sprintf("node%d", n.ID), n.Addr)
		}

		stopCrashRestart(ctx, t, c)
	})
}

// stopCrashRestart writes through c's leader before, while one follower
// is stopped and while the other is crashed, restarts each, and checks
// that each comes back on its address and every running node holds every
// write.
func stopCrashRestart(ctx context.Context, t *testing.T, c *journaltest.Cluster) {
	t.Helper()
	leader, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	_, _, err = c.Node(leader).Journal().Propose(ctx, []byte("before"))
	require.NoError(t, err)

	follower := leader%3 + 1
	addr := c.Node(follower).Addr
	require.NoError(t, c.Stop(follower))
	require.Nil(t, c.Node(follower).Journal())
	_, _, err = c.Node(leader).Journal().Propose(ctx, []byte("while-stopped"))
	require.NoError(t, err)
	require.NoError(t, c.Restart(ctx, follower))
	require.Equal(t, addr, c.Node(follower).Addr, "a restarted node keeps its address")

	other := 6 - leader - follower
	addr = c.Node(other).Addr
	require.NoError(t, c.Crash(other))
	idx, _, err := c.Node(leader).Journal().Propose(ctx, []byte("while-crashed"))
	require.NoError(t, err)
	require.NoError(t, c.Restart(ctx, other))
	require.Equal(t, addr, c.Node(other).Addr, "a restarted node keeps its address")
	require.NoError(t, c.WaitApplied(ctx, idx))
	for _, n := range c.Running() {
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		require.Subset(t, values(n), []string{"before", "while-stopped", "while-crashed"}, "node %d", n.ID)
	}
}

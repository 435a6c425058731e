package journal_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// crashConfig is a fast-ticking node of a test network.
func crashConfig(net *journaltest.Network, id uint64, fs vfs.FS) journal.Config {
	addr := fmt.Sprintf("node%d", id)
	return journal.Config{
		ID: id, Dir: "/" + addr, Addr: addr, FS: fs,
		Transport:    net.Transport(addr),
		StateMachine: &journaltest.Recorder{},
		TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
	}
}

// openThenClose runs Open to its end (after the power cut the original
// process goes on, on a disk nobody will see again) and closes what it
// opened. A cut that Open did not reach comes right after it.
func openThenClose(t *testing.T, cfg journal.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := journal.Open(ctx, cfg)
	if fs, ok := cfg.FS.(*journaltest.CrashFS); ok && fs.Armed() {
		fs.CutNow()
	}
	if err != nil {
		_ = cfg.Transport.Close()
		return
	}
	require.NoError(t, j.Close())
}

// A power cut at any step of a bootstrap leaves a data dir that opens
// again under the same configuration, leads and commits.
func TestCrashDuringBootstrap(t *testing.T) {
	// How many steps a bootstrap takes, up to Open's return.
	var steps int
	synctest.Test(t, func(t *testing.T) {
		probe := journaltest.NewCrashFS()
		pcfg := crashConfig(journaltest.NewNetwork(1), 1, probe)
		pcfg.Bootstrap = true
		openThenClose(t, pcfg)
		steps = probe.Steps()
	})
	require.Greater(t, steps, 5)
	for at := 1; at <= steps; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := journaltest.NewNetwork(1)
				fs := journaltest.NewCrashFS()
				fs.CrashAt(at)
				cfg := crashConfig(net, 1, fs)
				cfg.Bootstrap = true
				openThenClose(t, cfg)
				require.NotNil(t, fs.Crashed())

				cfg = crashConfig(net, 1, fs.Crashed())
				cfg.Bootstrap = true
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				j, err := journal.Open(ctx, cfg)
				require.NoError(t, err, "reopen after a power cut before step %d of %d", at, steps)
				defer func() { require.NoError(t, j.Close()) }()
				pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
				defer pcancel()
				_, _, err = j.Propose(pctx, []byte("x"))
				require.NoError(t, err, "the restarted node leads and commits")
			})
		})
	}
}

// A power cut at any step of a join leaves a data dir that opens again
// under the same configuration (joining again where the dir says nothing
// yet) and catches up with the cluster.
func TestCrashDuringJoin(t *testing.T) {
	var steps int
	synctest.Test(t, func(t *testing.T) {
		probeCluster := journaltest.NewCluster(t, journaltest.Options{Voters: 1, TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1})
		probe := journaltest.NewCrashFS()
		cfg := crashConfig(probeCluster.Net, 2, probe)
		cfg.Join = "node1"
		openThenClose(t, cfg)
		steps = probe.Steps()
	})
	require.Greater(t, steps, 5)
	for at := 1; at <= steps; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1})
				// The power cut takes node 2 off the network at once: it
				// acknowledges nothing the cut state does not hold.
				fs := journaltest.NewCrashFS()
				fs.CrashAt(at)
				fs.OnCrash(func() { c.Net.SetDown(2, true) })
				cfg := crashConfig(c.Net, 2, fs)
				cfg.Join = "node1"
				openThenClose(t, cfg)
				require.NotNil(t, fs.Crashed())

				c.Net.SetDown(2, false)
				cfg = crashConfig(c.Net, 2, fs.Crashed())
				cfg.Join = "node1"
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				j, err := journal.Open(ctx, cfg)
				require.NoError(t, err, "reopen after a power cut before step %d of %d", at, steps)
				defer func() { require.NoError(t, j.Close()) }()
				idx, _, err := c.Node(1).Journal().Propose(ctx, []byte("x"))
				require.NoError(t, err)
				require.NoError(t, j.WaitApplied(ctx, idx), "the restarted node catches up")
				require.Contains(t, j.Status().Members, journal.Member{ID: 2, Addr: "node2", Role: journal.Follower, MaxVersion: journal.NewestVersion})
			})
		})
	}
}

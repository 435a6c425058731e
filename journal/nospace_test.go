package journal_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/metricstest"
	"github.com/metatree/metatree/internal/tmpfs"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// spaceSeries scrapes j's collector for its no-space alarm and, when the
// series is there, its disk's free bytes (-1 when absent).
func spaceSeries(t *testing.T, j *journal.Journal) (alarm, free float64) {
	t.Helper()
	got := metricstest.Scrape(t, j.Collector())
	free, ok := got["metatree_journal_disk_free_bytes"]
	if !ok {
		free = -1
	}
	return got["metatree_journal_no_space_alarm"], free
}

// noSpaceOf reports whether j's applied membership records member id's
// no-space alarm.
func noSpaceOf(j *journal.Journal, id uint64) bool {
	for _, m := range j.Status().Members {
		if m.ID == id {
			return m.NoSpace
		}
	}
	return false
}

// requireNoSpace checks that a write on n is refused for member id's disk,
// as HTTP 507 no_space.
func requireNoSpace(t *testing.T, n *journaltest.Node, id uint64) {
	t.Helper()
	_, _, err := n.Journal().Propose(ctxFor(t, 5*time.Second), []byte("refused"))
	require.ErrorIs(t, err, journal.ErrNoSpace, "node %d", n.ID)
	require.ErrorContains(t, err, fmt.Sprintf("member %d's disk is nearly full", id))
	rec := httptest.NewRecorder()
	journal.WriteErrorForTest(rec, err)
	require.Equal(t, http.StatusInsufficientStorage, rec.Code)
	require.Contains(t, rec.Body.String(), `"no_space"`)
}

// lowDiskCluster starts a cluster of three voters on the real disk, node
// 1 the leader, whose node 2, a follower, has its free space set by the
// test through fs (in dir2, if set). A restart of node 2 after restart
// is set keeps its reserve but has the default ballast.
func lowDiskCluster(t *testing.T, fs vfs.FS, dir2 string, reserve int64, restart *atomic.Bool) *journaltest.Cluster {
	t.Helper()
	c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, OnDisk: true, Configure: func(cfg *journal.Config) {
		if cfg.ID != 2 {
			return
		}
		if dir2 != "" {
			cfg.Dir = dir2
		}
		cfg.FS = fs
		cfg.ReserveBytes = reserve
		if !restart.Load() {
			cfg.BallastBytes = -1
		}
		cfg.SpaceCheckInterval = time.Hour // the test runs the checks
	}})
	leader, err := c.WaitLeader(ctxFor(t, time.Minute))
	require.NoError(t, err)
	require.Equal(t, uint64(1), leader, "the bootstrapping node leads")
	return c
}

// TestFollowerLowDiskRaisesTheNoSpaceAlarm: a follower whose free space
// falls under its reserve raises its no-space alarm, and the whole
// cluster refuses writes (ErrNoSpace naming it, 507 no_space) on every
// node, leader included, while raft's own traffic goes on; the alarm
// survives a restart; once the follower has space it clears the alarm by
// itself and writes resume.
func TestFollowerLowDiskRaisesTheNoSpaceAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		c := lowDiskCluster(t, mem, "", 64<<20, new(atomic.Bool))
		ctx := ctxFor(t, time.Minute)
		n1, n2, n3 := c.Node(1), c.Node(2), c.Node(3)
		proposeVia(ctx, t, n1, "a")
		n2.Journal().CheckAndReportSpaceForTest()
		require.False(t, noSpaceOf(n1.Journal(), 2), "a disk with room raises no alarm")
		alarm, free := spaceSeries(t, n2.Journal())
		require.Equal(t, [2]float64{0, 1 << 30}, [2]float64{alarm, free}, "no alarm; the free bytes of the last check")
		_, free = spaceSeries(t, n1.Journal())
		require.Greater(t, free, 0.0, "node 1 measures its real disk")

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 48 << 20, TotalBytes: 2 << 30})
		n2.Journal().CheckAndReportSpaceForTest() // returns once the alarm is applied on node 2
		require.True(t, noSpaceOf(n2.Journal(), 2))
		for _, n := range []*journaltest.Node{n1, n3} {
			require.NoError(t, n.Journal().ReadBarrier(ctx), "raft's traffic goes on")
			require.True(t, noSpaceOf(n.Journal(), 2), "node %d applied the alarm", n.ID)
		}
		for _, n := range []*journaltest.Node{n1, n3} {
			requireNoSpace(t, n, 2)
			alarm, _ := spaceSeries(t, n.Journal())
			require.Equal(t, 1.0, alarm, "node %d reports the cluster's alarm", n.ID)
		}
		_, free = spaceSeries(t, n2.Journal())
		require.Equal(t, float64(48<<20), free)
		_, _, err := n2.Journal().Propose(ctx, []byte("refused"))
		require.ErrorIs(t, err, journal.ErrNoSpace, "the low follower refuses by its own guard too")
		require.NoError(t, n2.Journal().ReadBarrier(ctx), "the low follower still follows")
		require.NoError(t, n2.Journal().Status().Err)

		// The alarm is in the membership: a restarted node still refuses.
		require.NoError(t, c.Stop(3))
		require.NoError(t, c.Restart(ctx, 3))
		require.NoError(t, n3.Journal().ReadBarrier(ctx))
		requireNoSpace(t, n3, 2)

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		n2.Journal().CheckAndReportSpaceForTest()
		require.False(t, noSpaceOf(n2.Journal(), 2))
		// Each node takes writes again once it has applied the clearing
		// change; a read barrier waits for that.
		for _, n := range []*journaltest.Node{n1, n3} {
			require.NoError(t, n.Journal().ReadBarrier(ctx))
			alarm, _ = spaceSeries(t, n.Journal())
			require.Equal(t, 0.0, alarm, "node %d applied the clearing", n.ID)
		}
		proposeVia(ctx, t, n1, "b")
		proposeVia(ctx, t, n3, "c")
		require.NoError(t, n2.Journal().ReadBarrier(ctx))
		require.True(t, applied(n2, "a") && applied(n2, "b") && applied(n2, "c"), "%v", appliedData(n2))
		require.False(t, applied(n2, "refused"))
	})
}

// TestFollowerFullDiskOnARealFilesystem: the follower's data dir is on a
// small tmpfs that a filler nearly fills. The follower raises its alarm,
// the leader refuses writes, and the follower's WAL never meets ENOSPC
// (it keeps following, not halted); once the filler is removed the alarm
// clears, writes resume, and the follower's data dir reopens with every
// acknowledged write.
func TestFollowerFullDiskOnARealFilesystem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mnt := tmpfs.Mount(t, 48<<20)
		var restarted atomic.Bool
		c := lowDiskCluster(t, vfs.Default, filepath.Join(mnt, "data"), 8<<20, &restarted)
		ctx := ctxFor(t, time.Minute)
		n1, n2 := c.Node(1), c.Node(2)
		proposeVia(ctx, t, n1, "a")

		filler := filepath.Join(mnt, "filler")
		tmpfs.Fill(t, filler)
		n2.Journal().CheckAndReportSpaceForTest()
		require.NoError(t, n1.Journal().ReadBarrier(ctx))
		requireNoSpace(t, n1, 2)
		require.NoError(t, n2.Journal().ReadBarrier(ctx), "the full follower still follows")
		require.NoError(t, n2.Journal().Status().Err, "the follower is up, not halted")

		require.NoError(t, os.Remove(filler))
		n2.Journal().CheckAndReportSpaceForTest()
		require.NoError(t, n1.Journal().ReadBarrier(ctx))
		proposeVia(ctx, t, n1, "b")

		require.NoError(t, c.Stop(2))
		restarted.Store(true)
		require.NoError(t, c.Restart(ctx, 2))
		require.NoError(t, n2.Journal().ReadBarrier(ctx))
		require.True(t, applied(n2, "a") && applied(n2, "b"), "acknowledged writes survive: %v", appliedData(n2))
	})
}

// TestForwardedProposalsPassTheLeadersSpaceGuardAndAlarm: a proposal a
// follower forwards to the leader inside raft's stream meets the same
// space guard and no-space alarm on the leader as a local one. While the
// leader's free space is under its reserve (its alarm not yet raised),
// the follower's proposal never reaches the log; once the leader has room
// again, forwarded proposals apply. While a voter's alarm is raised, the
// leader drops a forwarded proposal too.
func TestForwardedProposalsPassTheLeadersSpaceGuardAndAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		leaderDisk, followerDisk := vfs.NewMem(), vfs.NewMem()
		roomy := vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30}
		low := vfs.DiskUsage{AvailBytes: 48 << 20, TotalBytes: 2 << 30}
		leaderDisk.TestingSetDiskUsage(roomy)
		followerDisk.TestingSetDiskUsage(roomy)
		disks := map[uint64]vfs.FS{1: leaderDisk, 2: followerDisk}
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
			fs, ok := disks[cfg.ID]
			if !ok {
				return
			}
			cfg.FS = fs
			cfg.ReserveBytes = 64 << 20
			cfg.BallastBytes = -1
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader, "the bootstrapping node leads")
		n1, n2 := c.Node(1), c.Node(2)
		proposeVia(ctx, t, n2, "warm-up")

		// The leader's guard refuses; its alarm is not raised yet (the
		// guard's check alone), so the follower still proposes and forwards.
		leaderDisk.TestingSetDiskUsage(low)
		require.NoError(t, n1.Journal().CheckSpaceForTest())
		require.ErrorIs(t, n1.Journal().WritableForTest(), journal.ErrNoSpace)
		require.NoError(t, n2.Journal().WritableForTest(), "the follower knows of no alarm")
		_, _, err = n2.Journal().Propose(ctxFor(t, 30*time.Second), []byte("forwarded"))
		require.Error(t, err, "the leader took a forwarded proposal while its disk was nearly full")

		leaderDisk.TestingSetDiskUsage(roomy)
		require.NoError(t, n1.Journal().CheckSpaceForTest())
		proposeVia(ctx, t, n2, "after")
		for _, n := range c.Nodes() {
			require.NoError(t, n.Journal().ReadBarrier(ctx))
			require.True(t, applied(n, "after"), "node %d", n.ID)
			require.False(t, applied(n, "forwarded"), "node %d applied a proposal the leader had no room for", n.ID)
		}

		// A voter's alarm: the leader drops what a member forwards to it, as
		// it refuses its own proposers.
		followerDisk.TestingSetDiskUsage(low)
		n2.Journal().CheckAndReportSpaceForTest()
		require.NoError(t, n1.Journal().ReadBarrier(ctx))
		require.True(t, noSpaceOf(n1.Journal(), 2))
		prop := &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(uint64(3)), To: new(uint64(1)),
			Entries: []*raftpb.Entry{{Data: journal.EncodeUserForTest([16]byte{9}, []byte("under alarm"))}}}
		hb := &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(uint64(3)), To: new(uint64(1))}
		require.Equal(t, []*raftpb.Message{hb}, n1.Journal().AdmitForwardedForTest([]*raftpb.Message{prop, hb}),
			"the proposal is dropped, the rest delivered")
		followerDisk.TestingSetDiskUsage(roomy)
		n2.Journal().CheckAndReportSpaceForTest()
		require.NoError(t, n1.Journal().ReadBarrier(ctx))
		require.Equal(t, []*raftpb.Message{prop, hb}, n1.Journal().AdmitForwardedForTest([]*raftpb.Message{prop, hb}),
			"with room again, the proposal is delivered")
	})
}

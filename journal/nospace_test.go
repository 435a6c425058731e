package journal

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/metricstest"
	"github.com/metatree/metatree/internal/tmpfs"
)

// spaceSeries scrapes j's collector for its no-space alarm and, when the
// series is there, its disk's free bytes (-1 when absent).
func spaceSeries(t *testing.T, j *Journal) (alarm, free float64) {
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
func noSpaceOf(j *Journal, id uint64) bool {
	for _, m := range j.Status().Members {
		if m.ID == id {
			return m.NoSpace
		}
	}
	return false
}

// requireNoSpace checks that a write on n is refused for member id's disk,
// as HTTP 507 no_space.
func requireNoSpace(t *testing.T, n *node, id uint64) {
	t.Helper()
	_, _, err := n.j.Propose(ctxT(t, 5*time.Second), []byte("refused"))
	require.ErrorIs(t, err, ErrNoSpace, "node %d", n.id)
	require.ErrorContains(t, err, fmt.Sprintf("member %d's disk is nearly full", id))
	rec := httptest.NewRecorder()
	writeError(rec, err)
	require.Equal(t, http.StatusInsufficientStorage, rec.Code)
	require.Contains(t, rec.Body.String(), `"no_space"`)
}

// lowDiskCluster starts node 1 (leader) and 3 on the real disk and node 2,
// a follower, with its free space set by the test through fs.
func lowDiskCluster(t *testing.T, fs vfs.FS, dir2 string, reserve int64) *cluster {
	t.Helper()
	c := newCluster(t)
	n1 := c.listen(1)
	require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Bootstrap = true }))
	c.waitLeader(1)
	n2 := c.listen(2)
	if dir2 != "" {
		n2.dir = dir2
	}
	require.NoError(t, c.open(n2, func(cfg *Config) {
		cfg.Join = n1.addr
		cfg.FS = fs
		cfg.ReserveBytes = reserve
		cfg.BallastBytes = -1
		cfg.SpaceCheckInterval = time.Hour // the test runs the checks
	}))
	n3 := c.listen(3)
	require.NoError(t, c.open(n3, func(cfg *Config) { cfg.Join = n1.addr }))
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
		c := lowDiskCluster(t, mem, "", 64<<20)
		n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
		propose(t, n1, "a")
		n2.j.checkSpace()
		require.False(t, noSpaceOf(n1.j, 2), "a disk with room raises no alarm")
		alarm, free := spaceSeries(t, n2.j)
		require.Equal(t, [2]float64{0, 1 << 30}, [2]float64{alarm, free}, "no alarm; the free bytes of the last check")
		_, free = spaceSeries(t, n1.j)
		require.Greater(t, free, 0.0, "node 1 measures its real disk")

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 48 << 20, TotalBytes: 2 << 30})
		n2.j.checkSpace() // returns once the alarm is applied on node 2
		require.True(t, noSpaceOf(n2.j, 2))
		for _, n := range []*node{n1, n3} {
			require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)), "raft's traffic goes on")
			require.True(t, noSpaceOf(n.j, 2), "node %d applied the alarm", n.id)
		}
		for _, n := range []*node{n1, n3} {
			requireNoSpace(t, n, 2)
			alarm, _ := spaceSeries(t, n.j)
			require.Equal(t, 1.0, alarm, "node %d reports the cluster's alarm", n.id)
		}
		_, free = spaceSeries(t, n2.j)
		require.Equal(t, float64(48<<20), free)
		_, _, err := n2.j.Propose(ctxT(t, 5*time.Second), []byte("refused"))
		require.ErrorIs(t, err, ErrNoSpace, "the low follower refuses by its own guard too")
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)), "the low follower still follows")
		require.NoError(t, n2.j.Status().Err)

		// The alarm is in the membership: a restarted node still refuses.
		n3.closeJournal()
		n3.sm = newMemSM()
		require.NoError(t, c.open(n3, nil))
		require.NoError(t, n3.j.ReadBarrier(ctxT(t, 5*time.Second)))
		requireNoSpace(t, n3, 2)

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		n2.j.checkSpace()
		require.False(t, noSpaceOf(n2.j, 2))
		// Each node takes writes again once it has applied the clearing
		// change; a read barrier waits for that.
		for _, n := range []*node{n1, n3} {
			require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
			alarm, _ = spaceSeries(t, n.j)
			require.Equal(t, 0.0, alarm, "node %d applied the clearing", n.id)
		}
		propose(t, n1, "b")
		propose(t, n3, "c")
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, n2.sm.has("a") && n2.sm.has("b") && n2.sm.has("c"), "%v", n2.sm.values())
		require.False(t, n2.sm.has("refused"))
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
		c := lowDiskCluster(t, vfs.Default, filepath.Join(mnt, "data"), 8<<20)
		n1, n2 := c.nodes[1], c.nodes[2]
		propose(t, n1, "a")

		filler := filepath.Join(mnt, "filler")
		tmpfs.Fill(t, filler)
		n2.j.checkSpace()
		require.NoError(t, n1.j.ReadBarrier(ctxT(t, 5*time.Second)))
		requireNoSpace(t, n1, 2)
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)), "the full follower still follows")
		require.NoError(t, n2.j.Status().Err, "the follower is up, not halted")

		require.NoError(t, os.Remove(filler))
		n2.j.checkSpace()
		require.NoError(t, n1.j.ReadBarrier(ctxT(t, 5*time.Second)))
		propose(t, n1, "b")

		n2.closeJournal()
		n2.sm = newMemSM()
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.ReserveBytes = 8 << 20; cfg.SpaceCheckInterval = time.Hour }))
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, n2.sm.has("a") && n2.sm.has("b"), "acknowledged writes survive: %v", n2.sm.values())
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
		guarded := func(fs vfs.FS) func(*Config) {
			return func(cfg *Config) {
				cfg.FS = fs
				cfg.ReserveBytes = 64 << 20
				cfg.BallastBytes = -1
				cfg.SpaceCheckInterval = time.Hour // the test runs the checks
			}
		}
		c := newCluster(t)
		n1 := c.listen(1)
		require.NoError(t, c.open(n1, func(cfg *Config) { guarded(leaderDisk)(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)
		n2 := c.listen(2)
		require.NoError(t, c.open(n2, func(cfg *Config) { guarded(followerDisk)(cfg); cfg.Join = n1.addr }))
		n3 := c.listen(3)
		require.NoError(t, c.open(n3, func(cfg *Config) { cfg.Join = n1.addr }))
		propose(t, n2, "warm-up")

		// The leader's guard refuses; its alarm is not raised yet (space.check
		// alone), so the follower still proposes and forwards.
		leaderDisk.TestingSetDiskUsage(low)
		require.NoError(t, n1.j.space.check())
		require.ErrorIs(t, n1.j.writable(), ErrNoSpace)
		require.NoError(t, n2.j.writable(), "the follower knows of no alarm")
		_, _, err := n2.j.Propose(ctxT(t, 30*time.Second), []byte("forwarded"))
		require.Error(t, err, "the leader took a forwarded proposal while its disk was nearly full")

		leaderDisk.TestingSetDiskUsage(roomy)
		require.NoError(t, n1.j.space.check())
		propose(t, n2, "after")
		for _, n := range c.nodes {
			require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
			require.True(t, n.sm.has("after"), "node %d", n.id)
			require.False(t, n.sm.has("forwarded"), "node %d applied a proposal the leader had no room for", n.id)
		}

		// A voter's alarm: the leader drops what a member forwards to it, as
		// it refuses its own proposers.
		followerDisk.TestingSetDiskUsage(low)
		n2.j.checkSpace()
		require.NoError(t, n1.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, noSpaceOf(n1.j, 2))
		prop := &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(uint64(3)), To: new(uint64(1)),
			Entries: []*raftpb.Entry{{Data: encodeUser([16]byte{9}, []byte("under alarm"))}}}
		hb := &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(uint64(3)), To: new(uint64(1))}
		require.Equal(t, []*raftpb.Message{hb}, n1.j.admitForwarded([]*raftpb.Message{prop, hb}),
			"the proposal is dropped, the rest delivered")
		followerDisk.TestingSetDiskUsage(roomy)
		n2.j.checkSpace()
		require.NoError(t, n1.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.Equal(t, []*raftpb.Message{prop, hb}, n1.j.admitForwarded([]*raftpb.Message{prop, hb}),
			"with room again, the proposal is delivered")
	})
}

package journal

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// membershipRecords returns, for every index from 1 to last, the membership
// n's store records as of it (without the index of its record and the
// dedupe keys an image's record adds) and the blob MembershipAt hands to an
// image taken there.
func membershipRecords(t *testing.T, n *node, last uint64) (stored []*membership, imaged [][]byte) {
	t.Helper()
	for i := uint64(1); i <= last; i++ {
		raw, err := n.j.store.MembershipAt(i)
		require.NoError(t, err, "node %d: stored membership at %d", n.id, i)
		m, err := decodeMembership(raw)
		require.NoError(t, err, "node %d: stored membership at %d", n.id, i)
		m.Index, m.Keys = 0, nil
		stored = append(stored, m)
		blob, err := n.j.membershipBlobAt(i)
		require.NoError(t, err, "node %d: MembershipAt(%d)", n.id, i)
		imaged = append(imaged, blob)
	}
	return stored, imaged
}

// A node restarted from an image older than the cluster's newest membership
// changes replays them from the membership as of the image, not from the
// newest one: every membership record it holds, and every blob MembershipAt
// hands to an image, is the same before and after the restart and the same
// as on the node that bootstrapped the cluster; an image taken after the
// restart carries the membership in force at its index.
func TestRestartReplaysMembershipHistoryExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		imgs := map[uint64]*fakeImages{}
		withImages := imagesFor(imgs, 1000) // a wide margin: the log is never compacted
		n1 := c.listen(1)
		opt1 := withImages(n1)
		require.NoError(t, c.open(n1, func(cfg *Config) { opt1(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)
		n2 := c.listen(2)
		opt2 := withImages(n2)
		require.NoError(t, c.open(n2, func(cfg *Config) { opt2(cfg); cfg.Join = n1.addr }))
		first := propose(t, n1, "a")
		ctx := ctxT(t, 30*time.Second)
		require.NoError(t, n2.j.WaitApplied(ctx, first))
		img := checkpoint(t, n2, imgs[2])

		// Membership changes after node 2's image: an observer joins, a member
		// is added and removed, another one is added.
		n3 := c.listen(3)
		opt3 := withImages(n3)
		require.NoError(t, c.open(n3, func(cfg *Config) { opt3(cfg); cfg.Join = n1.addr; cfg.Role = Observer }))
		require.NoError(t, n1.j.AddMember(ctx, 4, "127.0.0.1:1", Observer))
		require.NoError(t, n1.j.RemoveMember(ctx, 4, false))
		require.NoError(t, n1.j.AddMember(ctx, 5, "127.0.0.1:2", Observer))
		last := propose(t, n1, "b")
		require.NoError(t, n2.j.WaitApplied(ctx, last))

		want, wantImaged := membershipRecords(t, n1, last)
		stored, imaged := membershipRecords(t, n2, last)
		require.Equal(t, want, stored, "node 2's records before the restart")
		require.Equal(t, wantImaged, imaged, "node 2's image memberships before the restart")

		n2.closeJournal()
		n2.sm = newMemSM()
		require.NoError(t, c.open(n2, opt2))
		require.Equal(t, img, n2.j.Status().Image, "the restart loads the image older than the changes")
		require.NoError(t, n2.j.WaitApplied(ctx, last))
		stored, imaged = membershipRecords(t, n2, last)
		require.Equal(t, want, stored, "node 2's records after the restart")
		require.Equal(t, wantImaged, imaged, "node 2's image memberships after the restart")

		// An image taken after the restart carries the membership in force at
		// its index, the leader's record there.
		idx := checkpoint(t, n2, imgs[2])
		got, err := decodeMembership(imgs[2].images[idx].membership)
		require.NoError(t, err)
		blob, err := n1.j.store.MembershipAt(idx)
		require.NoError(t, err)
		at, err := decodeMembership(blob)
		require.NoError(t, err)
		at.Index, at.Keys = got.Index, got.Keys
		require.Equal(t, at, got, "the membership of the image at %d", idx)
		require.Equal(t, []uint64{4}, got.Removed)
		require.Contains(t, got.Members, uint64(5))
	})
}

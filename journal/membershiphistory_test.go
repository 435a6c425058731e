package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// membershipRecords returns, for every index from 1 to last, the membership
// n's store records as of it (without the index of its record and the
// dedupe keys an image's record adds) and the blob MembershipAt hands to an
// image taken there.
func membershipRecords(t *testing.T, n *journaltest.Node, last uint64) (stored, imaged [][]byte) {
	t.Helper()
	j := n.Journal()
	for i := uint64(1); i <= last; i++ {
		m, err := j.MembershipRecordForTest(i)
		require.NoError(t, err, "node %d: stored membership at %d", n.ID, i)
		stored = append(stored, m)
		blob, err := j.MembershipBlobAtForTest(i)
		require.NoError(t, err, "node %d: MembershipAt(%d)", n.ID, i)
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
		// A wide margin: the log is never compacted.
		c, imgs := newImageBubble(t, journaltest.Options{Voters: 2}, 1000)
		n1, n2 := c.Node(1), c.Node(2)
		first := propose(t, n1, "a")
		ctx := ctxFor(t, 30*time.Second)
		require.NoError(t, n2.Journal().WaitApplied(ctx, first))
		img := checkpoint(t, n2, imgs.of(2))

		// Membership changes after node 2's image: an observer joins, a member
		// is added and removed, another one is added.
		_, err := c.add(t, journal.Observer, nil)
		require.NoError(t, err)
		require.NoError(t, n1.Journal().AddMember(ctx, 4, "127.0.0.1:1", journal.Observer))
		require.NoError(t, n1.Journal().RemoveMember(ctx, 4, false))
		require.NoError(t, n1.Journal().AddMember(ctx, 5, "127.0.0.1:2", journal.Observer))
		last := propose(t, n1, "b")
		require.NoError(t, n2.Journal().WaitApplied(ctx, last))

		want, wantImaged := membershipRecords(t, n1, last)
		stored, imaged := membershipRecords(t, n2, last)
		require.Equal(t, want, stored, "node 2's records before the restart")
		require.Equal(t, wantImaged, imaged, "node 2's image memberships before the restart")

		c.stop(t, 2)
		require.NoError(t, c.restart(t, 2, nil))
		require.Equal(t, img, n2.Journal().Status().Image, "the restart loads the image older than the changes")
		require.NoError(t, n2.Journal().WaitApplied(ctx, last))
		stored, imaged = membershipRecords(t, n2, last)
		require.Equal(t, want, stored, "node 2's records after the restart")
		require.Equal(t, wantImaged, imaged, "node 2's image memberships after the restart")

		// An image taken after the restart carries the membership in force at
		// its index, the leader's record there.
		idx := checkpoint(t, n2, imgs.of(2))
		im, ok := imgs.of(2).image(idx)
		require.True(t, ok)
		got, err := journal.MembershipContentForTest(im.membership)
		require.NoError(t, err)
		at, err := n1.Journal().MembershipRecordForTest(idx)
		require.NoError(t, err)
		require.Equal(t, string(at), string(got), "the membership of the image at %d", idx)
		members, removed, err := journal.MembershipIDsForTest(im.membership)
		require.NoError(t, err)
		require.Equal(t, []uint64{4}, removed)
		require.Contains(t, members, uint64(5))
	})
}

package journal

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// countOf returns how many of values are v.
func countOf(values []string, v string) int {
	n := 0
	for _, x := range values {
		if x == v {
			n++
		}
	}
	return n
}

// A member configured with a narrower dedupe window (and compaction
// margin) than the cluster's joins by an image: it decides a retry by the
// cluster's window, which the image's membership carries, its shadow
// checkpoint replays the retry alike, and it keeps the cluster's window of
// log behind its newest image whatever its own CompactMargin.
func TestAMemberJoiningByImageUsesTheClusterWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clusterWindow, narrow = 20, 5
		c := newCluster(t)
		imgs := map[uint64]*fakeImages{}
		withImages := imagesFor(imgs, clusterWindow)
		n1 := c.listen(1)
		opt1 := withImages(n1)
		require.NoError(t, c.open(n1, func(cfg *Config) { opt1(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)

		for i := range clusterWindow + 5 {
			propose(t, n1, fmt.Sprintf("a%d", i))
		}
		checkpoint(t, n1, imgs[1])
		for i := range clusterWindow + 5 {
			propose(t, n1, fmt.Sprintf("b%d", i))
		}
		key := [16]byte{0xc1}
		keyedAt, _, err := n1.j.ProposeWithKey(ctxT(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		checkpoint(t, n1, imgs[1])
		first, err := n1.j.store.FirstIndex()
		require.NoError(t, err)
		require.Greater(t, first, uint64(1), "node 1 compacted its log")

		n3 := c.listen(3)
		opt3 := withImages(n3)
		require.NoError(t, c.open(n3, func(cfg *Config) {
			opt3(cfg)
			cfg.Join, cfg.Role = n1.addr, Observer
			cfg.CompactMargin, cfg.DedupeWindow = narrow, narrow
		}))
		select {
		case <-imgs[1].requests:
		case <-ctxT(t, 10*time.Second).Done():
			t.Fatal("no image requested for node 3")
		}
		installed := checkpoint(t, n1, imgs[1])
		propose(t, n1, "after-image")
		require.NoError(t, n3.j.ReadBarrier(ctxT(t, 10*time.Second)))
		require.Equal(t, 1, imgs[3].installs, "node 3 joined by the image")

		// A retry further from the first copy than node 3's own window and
		// within the cluster's: a duplicate on the leader, and on node 3.
		for n1.j.Status().Applied <= keyedAt+narrow {
			propose(t, n1, "filler")
		}
		again, _, err := n1.j.ProposeWithKey(ctxT(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		require.Equal(t, keyedAt, again, "the retry is a duplicate in the cluster's window")
		propose(t, n1, "barrier")
		require.NoError(t, n3.j.ReadBarrier(ctxT(t, 10*time.Second)))
		require.Equal(t, n1.sm.values(), n3.sm.values())
		require.Equal(t, 1, countOf(n3.sm.values(), "keyed"), "node 3 applied the keyed write once")

		// Node 3's shadow checkpoint replays the retry from the installed image
		// with the same window.
		older := checkpoint(t, n3, imgs[3])
		imgs[3].mu.Lock()
		shadow := slices.Collect(maps.Values(imgs[3].images[older].ents))
		imgs[3].mu.Unlock()
		require.Equal(t, 1, countOf(shadow, "keyed"), "node 3's shadow replay holds the keyed write once")

		// More than node 3's own margin and less than the cluster's window
		// later, a newer image does not compact the log up to the older one.
		// The fillers are counted rather than proposed until node 3 has
		// applied enough: node 3 lags node 1, and a loop on its applied index
		// overshoots the cluster's window.
		for range narrow + 1 {
			propose(t, n1, "filler")
		}
		require.NoError(t, n3.j.ReadBarrier(ctxT(t, 10*time.Second)))
		newest := checkpoint(t, n3, imgs[3])
		require.Greater(t, newest-older, uint64(narrow))
		require.Less(t, newest-older, uint64(clusterWindow))
		first, err = n3.j.store.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, installed+1, first, "node 3 keeps the cluster's window of log behind its newest image %d", newest)
	})
}

// The cluster's first membership change records the bootstrap member's
// window; no later change alters it; every record, image blob and restore
// carries it; a record without one (a cluster bootstrapped before it was
// recorded) leaves each member its own.
func TestTheClusterWindowIsRecordedOnceAndCarriedByEveryRecord(t *testing.T) {
	add := func(id uint64) *raftpb.ConfChange {
		return &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(id)}
	}
	m := newMembership()
	m.apply(1, add(1), confContext{Addr: "a", Window: 20}, &raftpb.ConfState{Voters: []uint64{1}})
	require.Equal(t, uint64(20), m.Window)
	m = m.clone()
	m.apply(2, add(2), confContext{Addr: "b", Window: 5}, &raftpb.ConfState{Voters: []uint64{1, 2}})
	require.Equal(t, uint64(20), m.Window, "a later change does not alter the window")
	got, err := decodeMembership(m.encode())
	require.NoError(t, err)
	require.Equal(t, uint64(20), got.windowOr(5))

	restored, err := NewClusterMembership(m.encode(), 9, 7, "c")
	require.NoError(t, err)
	got, err = decodeMembership(restored)
	require.NoError(t, err)
	require.Equal(t, uint64(20), got.Window, "a restore keeps the cluster's window")

	old, err := decodeMembership([]byte(`{"v":1,"index":3,"voters":[1],"members":{"1":{"id":1,"addr":"a"}}}`))
	require.NoError(t, err)
	require.Equal(t, uint64(5), old.windowOr(5), "a record without a window leaves the member's own")
	var none *membership
	require.Equal(t, uint64(5), none.windowOr(5))
}

package journal

import (
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/raftstore"
)

// An image written just before a power cut can be ahead of the durable
// commit index (the HardState carrying the commit had not been written
// yet), and is not raft's snapshot yet. Every entry it holds was applied,
// so committed: Open raises the durable commit to it and raft restarts
// from it (raft cannot start with Applied past its commit).
func TestRestartFromImageAheadOfDurableCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n1 := c.listen(1)
		imgs := &fakeImages{sm: func() *memSM { return n1.sm }, images: map[uint64]fakeImage{}, registry: &sync.Map{}, requests: make(chan struct{}, 1)}
		opt := func(cfg *Config) { cfg.Snapshots = imgs; cfg.StaleAfter = time.Hour }
		require.NoError(t, c.open(n1, func(cfg *Config) { opt(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)
		for i := range 5 {
			propose(t, n1, fmt.Sprintf("v%d", i))
		}
		idx := n1.j.Status().Applied
		blob, err := n1.j.membershipBlobAt(idx)
		require.NoError(t, err)
		imgs.images[idx] = fakeImage{index: idx, ents: maps.Clone(n1.sm.ents), membership: blob}
		want := n1.sm.values()
		n1.closeJournal()

		// The HardState as a power cut before its write leaves it.
		st, err := raftstore.Open(raftstore.Options{Dir: filepath.Join(n1.dir, "journal")})
		require.NoError(t, err)
		hs := st.HardState()
		require.GreaterOrEqual(t, hs.GetCommit(), idx)
		hs.Commit = new(idx - 2)
		require.NoError(t, st.Append(hs, nil, nil, true))
		require.NoError(t, st.Close())

		n1.sm = newMemSM()
		require.NoError(t, c.open(n1, opt))
		require.Equal(t, want, n1.sm.values(), "loaded from the image")
		require.GreaterOrEqual(t, n1.j.store.HardState().GetCommit(), idx, "the durable commit covers the image")
		c.waitLeader(1)
		propose(t, n1, "after")
		require.Equal(t, append(want, "after"), n1.sm.values())
	})
}

// A state loaded at an index the log no longer reaches is refused, naming
// it, rather than started with a gap.
func TestRestartRefusesStateOutsideTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n1 := c.listen(1)
		imgs := &fakeImages{sm: func() *memSM { return n1.sm }, images: map[uint64]fakeImage{}, registry: &sync.Map{}, requests: make(chan struct{}, 1)}
		opt := func(cfg *Config) { cfg.Snapshots = imgs }
		require.NoError(t, c.open(n1, func(cfg *Config) { opt(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)
		propose(t, n1, "a")
		last := n1.j.Status().Applied
		blob, err := n1.j.membershipBlobAt(last)
		require.NoError(t, err)
		n1.closeJournal()
		// An image past every entry of the log (a log that lost its tail).
		imgs.images[last+100] = fakeImage{index: last + 100, ents: map[uint64]string{}, membership: blob}
		n1.sm = newMemSM()
		err = c.open(n1, opt)
		require.ErrorContains(t, err, fmt.Sprintf("loaded at index %d, past the log's last entry %d", last+100, last))
	})
}

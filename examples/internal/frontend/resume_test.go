package frontend

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
)

// TestWatchResumesFromEveryRetainedIndex pins the rule of a resumed watch
// against the real journal and image store: after two checkpoints (the
// second compacts the log up to the first image), a watch resumed after any
// index the retained log starts after or holds replays exactly the batches
// after it, once each and in order, then goes on live; one index older is
// ErrCompacted.
func TestWatchResumesFromEveryRetainedIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	f, err := Start(ctx, Config{ID: 1, Dir: filepath.Join(t.TempDir(), "1"), Addr: freeAddr(t), Bootstrap: true, Insecure: true,
		CheckpointEntries: 1_000_000, CheckpointInterval: time.Hour, CompactMargin: 10})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	waitFor(t, 20*time.Second, "a leader", func() bool { return f.Journal().Status().Leader == 1 })

	// batchOf records which index each table under /w was created at.
	res, err := f.commit(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/w", Kind: "database"}}})
	require.NoError(t, err)
	require.NoError(t, res.Err)
	opts := catalog.WatchOptions{Prefix: "/w"}
	batchOf := map[uint64]string{res.Index: "/w"}
	// create returns the index of the last table it created.
	create := func(n int) (last uint64) {
		for range n {
			path := fmt.Sprintf("/w/t%d", len(batchOf)-1)
			res, err := f.commit(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: path, Kind: "table"}}})
			require.NoError(t, err)
			require.NoError(t, res.Err)
			batchOf[res.Index] = path
			last = res.Index
		}
		return last
	}
	var images []uint64
	for range 2 {
		create(30)
		info, err := f.Checkpointer().Checkpoint(ctx)
		require.NoError(t, err)
		images = append(images, info.Index)
	}
	create(5) // past the newest image too
	first, err := f.Journal().FirstIndex()
	require.NoError(t, err)
	require.Equal(t, images[0]+1, first, "the second image compacts the log up to the first")
	applied := f.tree.Index()
	require.GreaterOrEqual(t, applied, images[1]+5)

	last := applied
	for from := first - 1; from <= last; from++ {
		var got []catalog.Event
		w, err := f.tree.WatchFrom(ctx, from, opts, f.watchHistory(), func(ev catalog.Event) error {
			got = append(got, ev)
			return nil
		})
		require.NoError(t, err, "resume after %d (log %d..%d)", from, first, applied)
		var want []string
		for i := from + 1; i <= applied; i++ {
			if p, ok := batchOf[i]; ok {
				want = append(want, fmt.Sprintf("%d %s", i, p))
			}
		}
		var seen []string
		for _, ev := range got {
			require.Equal(t, catalog.OpCreate, ev.Op)
			seen = append(seen, fmt.Sprintf("%d %s", ev.Index, ev.After.Path))
		}
		require.Equal(t, want, seen, "replay after %d: every batch after it, once, in order", from)

		// Then live, with no gap and no duplicate (the cluster's own
		// batches, outside /w, may apply meanwhile).
		idx := create(1)
		ev, err := w.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, idx, ev.Index, "the next live event after resuming at %d", from)
		require.Equal(t, batchOf[ev.Index], ev.After.Path)
		w.Close()
		applied = f.tree.Index()
	}

	_, err = f.tree.WatchFrom(ctx, first-2, opts, f.watchHistory(), func(catalog.Event) error { return nil })
	require.ErrorIs(t, err, catalog.ErrCompacted, "one index older than the log starts after")
}

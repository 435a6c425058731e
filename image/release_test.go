package image

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

var _ journal.FetchReleaser = (*Store)(nil)

// A fetched image raft did not take is released: the catalog decoded while
// it downloaded is dropped and the file is no longer pinned against Prune.
// Fetching it again (the leader resends it) pins it again, and Install
// still loads it, from the file.
func TestReleaseFetchedDropsTheStagedImage(t *testing.T) {
	ctx := context.Background()
	src, peer := servedCatalogImage(t, 300)
	live := catalog.New()
	s := openStore(t, vfs.NewMem(), "/data", live)
	staged := func() (bool, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mu.staged != nil, s.mu.pinned[300]
	}

	require.NoError(t, s.Fetch(ctx, peer, 300))
	st, pinned := staged()
	require.True(t, st, "the catalog was decoded while it downloaded")
	require.True(t, pinned)

	s.ReleaseFetched(300)
	st, pinned = staged()
	require.False(t, st, "the decoded catalog is released")
	require.False(t, pinned, "the file is no longer pinned")

	require.NoError(t, s.Fetch(ctx, peer, 300))
	_, pinned = staged()
	require.True(t, pinned, "a second Fetch of the same image pins it again")
	require.NoError(t, s.Install(ctx, 300))
	require.Equal(t, saveBytes(t, src.live), saveBytes(t, live))
}

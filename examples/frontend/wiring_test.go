package frontend

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// The library's packages fit together with no adapter: image and journal
// import neither each other nor heartbeat, so the checks live here, where
// all three are imported. A signature that drifts fails the build.
var (
	_ heartbeat.Journal     = (*journal.Journal)(nil)
	_ image.Journal         = (*journal.ImageLog)(nil)
	_ journal.Snapshots     = (*image.Store)(nil)
	_ journal.HaltSource    = (*image.Store)(nil)
	_ journal.FetchReleaser = (*image.Store)(nil)
)

// A frontend that joins after the log was compacted catches up from an
// image the leader writes on the journal's request: the journal's
// Snapshots is the plain *image.Store, whose running Checkpointer answers
// RequestImage. Scheduled checkpoints are an hour away, so without the
// request the joiner would wait past the test's deadline.
func TestJoinAfterCompactionGetsAnImageOnRequest(t *testing.T) {
	f1 := startOne(t, func(c *Config) { c.CompactMargin = 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The first image compacts nothing; the second compacts the log up to
	// the first.
	for i := range 6 {
		_, err := f1.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: fmt.Sprintf("/db%d", i), Kind: "database"}}})
		require.NoError(t, err)
		if i%3 == 2 {
			_, err = f1.ckpt.Checkpoint(ctx)
			require.NoError(t, err)
		}
	}
	first, err := f1.Journal().FirstIndex()
	require.NoError(t, err)
	require.Greater(t, first, uint64(2), "the log is compacted: a joiner needs an image")

	f2, err := Start(ctx, Config{ID: 2, Dir: filepath.Join(t.TempDir(), "2"), Addr: freeAddr(t), Join: f1.Addr(), Token: "secret",
		HeartbeatInterval: time.Hour, CheckpointEntries: 1 << 40, CheckpointInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f2.Close()) })
	require.NoError(t, f2.Journal().WaitApplied(ctx, f1.Journal().Status().Committed))
	_, ok := f2.Tree().Get("/db5")
	require.True(t, ok, "the joiner has the writes made before it joined")
}

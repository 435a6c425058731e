package frontendtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
)

// A follower installing a peer's image makes the snapshot durable before
// it renames image.N.fetched to image.N. A watch resumed from the index
// the log starts after, while that rename is held, waits for the install
// and then replays from image N with the events after it.
// (History().Base is asked for the base whenever the live catalog is past
// the resume point.)
func TestWatchResumedDuringAnImageInstallFindsItsBase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := threeWithLeaderIn(t, Options{Frontends: 3, InMemory: true,
			Config: frontend.Config{CompactMargin: 10, CheckpointEntries: 1 << 40, CheckpointInterval: time.Hour}})
		lf, lagging := c.Frontend(leader), followers[1]
		lag := c.Frontend(lagging)
		c.Partition(lagging, leader, followers[0])

		// Two images: the second compacts the log past the lagging
		// frontend, which needs an image.
		for k := range 2 {
			for n := range 15 {
				marker(ctx, t, lf, fmt.Sprintf("/filler-%d-%d", k, n))
			}
			_, err := lf.Checkpointer().Checkpoint(ctx)
			require.NoError(t, err)
		}

		held, release := make(chan struct{}), make(chan struct{})
		var holdOnce, releaseOnce sync.Once
		t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
		c.FS(lagging).OnRename(func(old, _ string) {
			if strings.HasSuffix(old, ".fetched") {
				holdOnce.Do(func() {
					close(held)
					<-release
				})
			}
		})
		c.Heal()
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("the lagging frontend never promotes a fetched image")
		}

		first, err := lag.Journal().FirstIndex()
		require.NoError(t, err)
		idx, err := lag.Images().Indexes()
		require.NoError(t, err)
		for _, i := range idx {
			require.Greater(t, i, first-1, "no image at or below the log's start is in place yet")
		}

		// The base a resume from the log's start replays from (History is
		// what WatchFrom asks when the live catalog is past the resume).
		type based struct {
			t   *catalog.Tree
			at  uint64
			err error
		}
		done := make(chan based, 1)
		go func() {
			var b based
			b.t, b.at, b.err = lag.History().Base(ctx, first-1)
			done <- b
		}()
		synctest.Wait()
		releaseOnce.Do(func() { close(release) })
		b := <-done
		require.NoError(t, b.err, "the base waits for the install instead of finding none")
		require.Equal(t, first-1, b.at, "the base is the image the log starts after")

		// A watch resumed there gets the events after it.
		var replayed []catalog.Event
		w, err := lag.Tree().WatchFrom(ctx, first-1, catalog.WatchOptions{Prefix: "/after"}, lag.History(), func(ev catalog.Event) error {
			replayed = append(replayed, ev)
			return nil
		})
		require.NoError(t, err)
		defer w.Close()
		after := marker(ctx, t, lf, "/after")
		for _, ev := range replayed {
			require.Greater(t, ev.Index, first-1, "every replayed event is after the resume point")
		}
		ev, err := w.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, after, ev.Index)
		require.Equal(t, "/after", eventPath(ev))
	})
}

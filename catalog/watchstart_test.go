package catalog

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWatchStartIsCoveredByTheNextRead pins the contract a consumer of
// Watch builds on (watch, then read the tree, then apply the events after
// Watcher.Start): the read covers every batch the watcher skips, whatever
// point of Apply the batch is at when Watch runs. Here a batch is held
// after its decoding, before it takes the tree's lock: the watcher must
// not skip it while a read still misses it, or its change reaches neither
// (a frontend's member records then lag the catalog for good).
func TestWatchStartIsCoveredByTheNextRead(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/a", Kind: "dir"}}})

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tr.beforeApplyLock = func() {
		once.Do(func() {
			close(held)
			<-release
		})
	}
	data, err := Batch{Ops: []Op{{Type: OpCreate, Path: "/a/b", Kind: "dir"}}}.Encode()
	require.NoError(t, err)
	applied := make(chan *Result)
	go func() { applied <- tr.Apply(2, data).(*Result) }()
	<-held

	w := tr.Watch(WatchOptions{})
	defer w.Close()
	_, readSeesB := tr.Get("/a/b")
	read := tr.Index()
	require.GreaterOrEqual(t, read, w.Start(), "the read after Watch is at index %d but the watcher skips the batches up to %d", read, w.Start())

	close(release)
	require.NoError(t, (<-applied).Err)
	ev, ok, err := w.TryNext()
	require.NoError(t, err)
	if readSeesB {
		require.False(t, ok, "the read already saw /a/b, yet the watcher delivers %v", ev)
		return
	}
	require.True(t, ok, "neither the read nor the watcher has batch 2")
	require.Equal(t, uint64(2), ev.Index)
	require.Equal(t, "/a/b", ev.After.Path)
}

// TestWatchThenReadFollowsConcurrentApplies is the same contract under
// load: while batches apply, a consumer watches, reads a counter node
// whose value is the index of the batch that last set it, and then takes
// events. The value read plus the events after it must reach every batch
// in order, with none missing and none seen twice.
func TestWatchThenReadFollowsConcurrentApplies(t *testing.T) {
	tr := New()
	set := func(i uint64) Batch {
		return Batch{Ops: []Op{{Type: OpUpdate, Path: "/c", Set: map[string]Value{"n": Int(int64(i))}}}}
	}
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/c", Kind: "counter", Set: map[string]Value{"n": Int(1)}}}})
	const batches = 20_000
	done := make(chan error, 1)
	go func() {
		for i := uint64(2); i <= batches; i++ {
			data, err := set(i).Encode()
			if err == nil {
				err = tr.Apply(i, data).(*Result).Err
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	watches := 0
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			require.Positive(t, watches)
			return
		default:
		}
		watches++
		w := tr.Watch(WatchOptions{Prefix: "/c"})
		n, ok := tr.Get("/c")
		require.True(t, ok)
		seen := uint64(n.Attrs["n"].Int64())
		require.GreaterOrEqual(t, seen, w.Start(), "watch %d: the read saw batch %d, the watcher skips up to %d", watches, seen, w.Start())
		for range 3 {
			ev, ok, err := w.TryNext()
			if errors.Is(err, ErrResync) {
				break // the applier ran a Buffer ahead: a consumer re-reads
			}
			require.NoError(t, err)
			if !ok {
				break
			}
			got := uint64(ev.After.Attrs["n"].Int64())
			if got <= seen {
				continue // applied before the read, published after the cursor
			}
			require.Equal(t, seen+1, got, "watch %d: after batch %d the watcher delivers batch %d", watches, seen, got)
			seen = got
		}
		w.Close()
	}
}

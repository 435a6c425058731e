package frontend

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fe "github.com/metatree/metatree/examples/frontend"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/journal"
)

// TestWatchResumesFromEveryRetainedIndex pins the rule of a resumed watch
// against the real journal and image store: after two checkpoints (the
// second compacts the log up to the first image), a watch resumed after any
// index the retained log starts after or holds replays exactly the batches
// after it, once each and in order, then goes on live; one index older is
// ErrCompacted. The log holds entries that never reach the catalog around
// the images (configuration changes, the empty entry of a new term, the
// leader's clock), so each image's index is past its catalog's own index.
func TestWatchResumesFromEveryRetainedIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := Config{Config: fe.Config{ID: 1, Dir: filepath.Join(t.TempDir(), "1"), Addr: freeAddr(t), Bootstrap: true, Insecure: true,
		CheckpointEntries: 1_000_000, CheckpointInterval: time.Hour, CompactMargin: 10, StaleAfter: time.Second}}
	f, err := Start(ctx, cfg)
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
	checkpoint := func() {
		info, err := f.Checkpointer().Checkpoint(ctx)
		require.NoError(t, err)
		require.Greater(t, info.Index, f.tree.Index(), "the image is past its catalog's own index")
		images = append(images, info.Index)
	}
	// The monitor journals this process's epoch in its member record (a
	// catalog batch of its own) once it first answers: it must land
	// before each image, whose premise is a catalog index below the
	// image's.
	recorded := func(what string) {
		waitFor(t, 20*time.Second, what, func() bool {
			m, ok := f.Members().Member(1)
			return ok && m.Epoch == f.Epoch() && m.Status == heartbeat.StatusAlive
		})
	}
	// The first image right after two configuration changes.
	recorded("the member record of the process")
	create(30)
	require.NoError(t, f.Journal().AddMember(ctx, 99, freeAddr(t), journal.Observer))
	require.NoError(t, f.Journal().RemoveMember(ctx, 99, false))
	checkpoint()
	// A restart: the new term begins with an empty entry.
	require.NoError(t, f.Close())
	cfg.Bootstrap = false
	f, err = Start(ctx, cfg)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "a leader after the restart", func() bool { return f.Journal().Status().Leader == 1 })
	recorded("the member record of the new process")
	// The second image after a clock entry of the leader.
	create(30)
	waitFor(t, 20*time.Second, "a clock entry", func() bool { return f.Journal().Status().Applied > f.tree.Index() })
	checkpoint()
	create(5) // past the newest image too
	first, err := f.Journal().FirstIndex()
	require.NoError(t, err)
	require.Equal(t, images[0]+1, first, "the second image compacts the log up to the first")
	applied := f.tree.Index()
	require.GreaterOrEqual(t, applied, images[1]+5)

	last := applied
	for from := first - 1; from <= last; from++ {
		var got []catalog.Event
		w, err := f.tree.WatchFrom(ctx, from, opts, f.History(), func(ev catalog.Event) error {
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

	_, err = f.tree.WatchFrom(ctx, first-2, opts, f.History(), func(catalog.Event) error { return nil })
	require.ErrorIs(t, err, catalog.ErrCompacted, "one index older than the log starts after")
}

// fakeStream is a watch client's end of the response: it records what it
// is sent, and with hold set, every Write waits for hold to close (a
// client that reads nothing), telling of the first through blocked.
type fakeStream struct {
	header  http.Header
	hold    chan struct{}
	blocked chan struct{}
	once    sync.Once
	wrote   chan struct{} // a signal after each Write (cap 1)
	mu      sync.Mutex
	buf     bytes.Buffer
}

func newFakeStream(hold bool) *fakeStream {
	s := &fakeStream{header: http.Header{}, blocked: make(chan struct{}), wrote: make(chan struct{}, 1)}
	if hold {
		s.hold = make(chan struct{})
	}
	return s
}

func (s *fakeStream) Header() http.Header { return s.header }
func (s *fakeStream) WriteHeader(int)     {}
func (s *fakeStream) Write(p []byte) (int, error) {
	if s.hold != nil {
		s.once.Do(func() { close(s.blocked) })
		<-s.hold
	}
	s.mu.Lock()
	s.buf.Write(p)
	s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}
func (s *fakeStream) SetWriteDeadline(time.Time) error { return nil }
func (s *fakeStream) FlushError() error                { return nil }

func (s *fakeStream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestSlowResumedWatchLeavesTheReplayGateFree resumes a watch for a client
// that reads nothing, with more to replay than the stream buffers: while
// that watch waits on its client, the replay gate is free, and another
// resumed watch replays and goes live.
func TestSlowResumedWatchLeavesTheReplayGateFree(t *testing.T) {
	f, ctx := startLeader(t)
	res, err := f.commit(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/w", Kind: "database"}}})
	require.NoError(t, err)
	require.NoError(t, res.Err)
	const n = 150 // some 15 KB of event lines
	for i := range n {
		res, err := f.commit(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: fmt.Sprintf("/w/t%d", i), Kind: "table"}}})
		require.NoError(t, err)
		require.NoError(t, res.Err)
	}
	serve := func(s *fakeStream) (stop func() error) {
		rctx, cancel := context.WithCancel(ctx)
		req := httptest.NewRequestWithContext(rctx, http.MethodGet, "/v1/watch?prefix=/w&from_index=0", nil)
		done := make(chan error, 1)
		go func() { done <- f.watch(s, req) }()
		return func() error {
			cancel()
			return <-done
		}
	}

	slow := newFakeStream(true)
	stopSlow := serve(slow)
	select {
	case <-slow.blocked:
	case <-ctx.Done():
		t.Fatal("the slow watch never wrote to its client")
	}
	require.Zero(t, len(f.replays.ch), "a resumed watch waiting on its client holds the replay gate")

	fast := newFakeStream(false)
	stopFast := serve(fast)
	for !strings.Contains(fast.String(), `{"progress":`) {
		select {
		case <-fast.wrote:
		case <-ctx.Done():
			t.Fatalf("the second resumed watch did not go live; it wrote %q", fast.String())
		}
	}
	require.NoError(t, stopFast())
	lines := strings.Split(strings.TrimSpace(fast.String()), "\n")
	require.Len(t, lines, n+2, "the replay of every batch, then the progress line")
	require.Contains(t, lines[0], `"path":"/w"`)
	require.Contains(t, lines[n], fmt.Sprintf(`"path":"/w/t%d"`, n-1))

	close(slow.hold)
	require.NoError(t, stopSlow())
	slowLines := strings.Split(slow.String(), "\n")
	require.Greater(t, len(slowLines), n+1)
	require.Equal(t, lines[:n+1], slowLines[:n+1], "the slow client gets the same replay")
}

package image

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/metatree/metatree/catalog"
	"github.com/stretchr/testify/require"
)

// served is a node whose Store answers peers over real loopback HTTP.
type served struct {
	*node
	srv      *httptest.Server
	requests atomic.Int32 // every request
	gets     atomic.Int32 // image downloads
}

// serve starts an HTTP server for n's Store; wrap, when set, wraps the
// image download handler.
func serve(t testing.TB, n *node, wrap func(http.Handler) http.Handler) *served {
	t.Helper()
	s := &served{node: n}
	h := n.store.Handler()
	dl := h
	if wrap != nil {
		dl = wrap(h)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.URL.Path == PathPrefix+"latest" {
			h.ServeHTTP(w, r)
			return
		}
		s.gets.Add(1)
		dl.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *served) addr() string { return strings.TrimPrefix(s.srv.URL, "http://") }

// follower is a node that applied entries 1..n and checkpointed at n.
func follower(t testing.TB, n uint64, wrap func(http.Handler) http.Handler) *served {
	t.Helper()
	f := newNode(t, vfs.NewMem())
	f.j.append(int(n))
	info, err := f.cp.Checkpoint(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, info.Index)
	return serve(t, f, wrap)
}

// leader is a node that may not checkpoint by shadow replay (Enabled false)
// and adopts its peers' images.
func leader(t testing.TB, fs vfs.FS, peers []string, opts ...func(*CheckpointerConfig)) *node {
	t.Helper()
	return newNode(t, fs, append([]func(*CheckpointerConfig){func(c *CheckpointerConfig) {
		c.Enabled = func() bool { return false }
		c.Peers = func() []string { return peers }
	}}, opts...)...)
}

func (n *node) tickOnce() tickResult {
	n.clock.tick(time.Minute)
	return <-n.ticks
}

func imageFiles(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	require.NoError(t, err)
	var out []string
	for _, n := range names {
		if n != lockName {
			out = append(out, n)
		}
	}
	return out
}

// corruptDownloads flips one byte in the middle of every image served.
func corruptDownloads(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		b := rec.Body.Bytes()
		if len(b) > 0 {
			b[len(b)/2] ^= 0x40
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(b)
	})
}

// A leader that may not checkpoint adopts a follower's image: the file is
// the follower's, byte for byte; the journal records it with the image's
// index, term and membership and compacts behind it; the live state and
// the journal's entries are not read.
func TestAdoptPeerImage(t *testing.T) {
	f := follower(t, 1250, nil)
	l := leader(t, vfs.NewMem(), []string{f.addr()})
	l.j.append(1300)

	r := l.tickOnce()
	require.NoError(t, r.err)
	require.True(t, r.ran)
	require.Equal(t, uint64(1250), r.info.Index)

	peerFile := readAll(t, f.fs, "/data/image/image.1250")
	require.Equal(t, peerFile, readAll(t, l.fs, "/data/image/image.1250"), "the adopted file is the peer's, byte for byte")
	require.Equal(t, []string{"image.1250"}, imageFiles(t, l.fs, "/data/image"), "installed under its final name, nothing left over")
	peerInfo, err := f.store.Verify(1250)
	require.NoError(t, err)
	require.Equal(t, []Header{{Index: 1250, Term: peerInfo.Term, Membership: peerInfo.Membership}}, l.j.recordedImages())
	require.Equal(t, uint64(2), peerInfo.Term, "the follower's term at 1250")
	require.Equal(t, "voters=1,2,3@1", string(peerInfo.Membership))
	require.Zero(t, l.j.Compacted(), "the first image compacts nothing: no earlier image to start the log after")
	require.Zero(t, l.j.Reads(), "no shadow replay on the leader")
	require.Equal(t, expectedKV(1300), l.live.snapshot(), "the live state is untouched")
	_, err = l.store.Verify(1250)
	require.NoError(t, err)

	st := l.cp.Status()
	require.Equal(t, uint64(1250), st.Last.Index)
	require.Equal(t, f.addr(), st.LastSource)
	require.Equal(t, 1, st.Written)
	require.Equal(t, 1, st.Adopted)
	require.Zero(t, st.Failures)
	require.NoError(t, st.LastError)

	// Below the threshold the peers are not even asked.
	asked := f.requests.Load()
	l.j.append(49) // applied 1349: 99 past the image
	require.False(t, l.tickOnce().ran)
	require.Equal(t, asked, f.requests.Load())

	// Later rounds adopt the newer images, compact the leader's log up to
	// the image before and prune the older ones.
	prev := uint64(1250)
	for _, next := range []uint64{1450, 1600} {
		f.j.append(int(next - f.j.Index()))
		_, err := f.cp.Checkpoint(context.Background())
		require.NoError(t, err)
		l.j.append(int(next + 50 - l.j.Index()))
		r := l.tickOnce()
		require.NoError(t, r.err)
		require.Equal(t, next, r.info.Index)
		require.Equal(t, prev, l.j.Compacted(), "the leader's log starts after the image before %d", next)
		prev = next
	}
	ids, err := l.store.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{1600, 1450}, ids)
	require.Equal(t, 3, l.cp.Status().Adopted)
	require.Zero(t, l.j.Reads())
}

// Of several peers, the newest image that is past the local one and not
// past the applied index is taken; a corrupt download is passed over for
// the next peer.
func TestAdoptChoosesNewestSuitable(t *testing.T) {
	ahead := follower(t, 400, nil)
	corrupt := follower(t, 250, corruptDownloads)
	good := follower(t, 200, nil)
	old := follower(t, 100, nil)
	l := leader(t, vfs.NewMem(), []string{old.addr(), good.addr(), ahead.addr(), corrupt.addr()})
	l.j.append(150)
	_, err := l.cp.Checkpoint(context.Background()) // on demand: shadow replay
	require.NoError(t, err)
	l.j.append(150)

	r := l.tickOnce()
	require.NoError(t, r.err)
	require.Equal(t, uint64(200), r.info.Index)
	require.Equal(t, good.addr(), l.cp.Status().LastSource)
	require.Equal(t, int32(0), ahead.gets.Load(), "an image past the applied index is not fetched")
	require.Equal(t, int32(1), corrupt.gets.Load(), "the newest suitable was tried first")
	require.Equal(t, int32(0), old.gets.Load(), "an image older than the local one is not fetched")
	require.Equal(t, []uint64{150, 200}, l.j.Images())
	require.Equal(t, []string{"image.150", "image.200"}, slices.Sorted(slices.Values(imageFiles(t, l.fs, "/data/image"))))
	require.Equal(t, readAll(t, good.fs, "/data/image/image.200"), readAll(t, l.fs, "/data/image/image.200"))
}

// A corrupt download is rejected: no file is left, nothing is recorded, the
// failure is reported and retried at the next interval.
func TestAdoptCorruptDownloadRejected(t *testing.T) {
	var logs logBuffer
	f := follower(t, 250, corruptDownloads)
	l := leader(t, vfs.NewMem(), []string{f.addr()}, func(c *CheckpointerConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	l.j.append(300)
	for i := 1; i <= 2; i++ {
		r := l.tickOnce()
		require.True(t, r.ran)
		require.ErrorIs(t, r.err, ErrNoPeerImage)
		require.ErrorIs(t, r.err, ErrCorrupt)
		require.ErrorContains(t, r.err, f.addr())
		require.Equal(t, int32(i), f.gets.Load(), "retried at the next interval")
		require.Empty(t, imageFiles(t, l.fs, "/data/image"))
		require.Empty(t, l.j.recordedImages())
		st := l.cp.Status()
		require.Equal(t, i, st.Failures)
		require.ErrorIs(t, st.LastError, ErrNoPeerImage)
		require.Zero(t, st.Written)
	}
	require.Contains(t, logs.String(), "level=WARN msg=\"checkpoint failed; retrying at the next interval\"")
	require.Zero(t, l.j.Reads())
}

// A peer image past the applied index is not adopted (this node has not
// applied what it holds); once applied catches up it is.
func TestAdoptNotPastApplied(t *testing.T) {
	f := follower(t, 400, nil)
	l := leader(t, vfs.NewMem(), []string{f.addr()})
	l.j.append(300)
	r := l.tickOnce()
	require.ErrorIs(t, r.err, ErrNoPeerImage)
	require.ErrorContains(t, r.err, "past this node's applied index 300")
	require.Zero(t, f.gets.Load())
	require.Empty(t, imageFiles(t, l.fs, "/data/image"))
	require.Empty(t, l.j.recordedImages())
	require.Equal(t, 1, l.cp.Status().Failures)

	l.j.append(100)
	r = l.tickOnce()
	require.NoError(t, r.err)
	require.Equal(t, uint64(400), r.info.Index)
	require.Equal(t, []uint64{400}, l.j.Images())
	require.Zero(t, l.cp.Status().Failures)
}

// An image whose term at its index differs from this node's log is another
// history: rejected and removed, nothing recorded.
func TestAdoptRejectsOtherHistory(t *testing.T) {
	p := newNode(t, vfs.NewMem())
	p.j.append(250)
	_, err := p.store.Write(context.Background(), Header{Index: 250, Term: 7, Membership: []byte("voters=1,2,3@0")}, p.live.Save)
	require.NoError(t, err)
	f := serve(t, p, nil)
	l := leader(t, vfs.NewMem(), []string{f.addr()})
	l.j.append(300)
	r := l.tickOnce()
	require.ErrorIs(t, r.err, ErrNoPeerImage)
	require.ErrorContains(t, r.err, "term 7 at index 250, this node's log term 1")
	require.Equal(t, int32(1), f.gets.Load())
	require.Empty(t, imageFiles(t, l.fs, "/data/image"), "the rejected download is removed")
	require.Empty(t, l.j.recordedImages())
}

// With ShadowFallback, a node with no peer image to adopt checkpoints by
// shadow replay after all.
func TestAdoptShadowFallback(t *testing.T) {
	empty := serve(t, newNode(t, vfs.NewMem()), nil) // has no image
	l := leader(t, vfs.NewMem(), []string{empty.addr()}, func(c *CheckpointerConfig) { c.ShadowFallback = true })
	l.j.append(300)
	r := l.tickOnce()
	require.NoError(t, r.err)
	require.Equal(t, uint64(300), r.info.Index)
	require.NotZero(t, l.j.Reads(), "shadow replay")
	st := l.cp.Status()
	require.Equal(t, "", st.LastSource)
	require.Equal(t, 1, st.Written)
	require.Zero(t, st.Adopted)

	// Without it, the same round fails and says why.
	l2 := leader(t, vfs.NewMem(), []string{empty.addr()})
	l2.j.append(300)
	r = l2.tickOnce()
	require.ErrorIs(t, r.err, ErrNoPeerImage)
	require.ErrorContains(t, r.err, "has no image")
	require.Zero(t, l2.j.Reads())
}

// An adopted image the journal failed to record is recorded at the next
// check without being downloaded again.
func TestAdoptRecordFailureRetried(t *testing.T) {
	f := follower(t, 250, nil)
	l := leader(t, vfs.NewMem(), []string{f.addr()})
	l.j.append(300)
	l.j.FailImageWritten(context.DeadlineExceeded)
	r := l.tickOnce()
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	require.Equal(t, []string{"image.250"}, imageFiles(t, l.fs, "/data/image"))
	l.j.FailImageWritten(nil)
	r = l.tickOnce()
	require.NoError(t, r.err)
	require.Equal(t, []uint64{250}, l.j.Images())
	require.Equal(t, int32(1), f.gets.Load(), "not downloaded again")
	st := l.cp.Status()
	require.Equal(t, f.addr(), st.LastSource)
	require.Equal(t, 1, st.Adopted)
	require.Zero(t, st.Failures)
}

// Without Peers, a disabled node skips the checkpoint, and says so.
func TestDisabledWithoutPeersWarns(t *testing.T) {
	var logs logBuffer
	n := newNode(t, vfs.NewMem(), func(c *CheckpointerConfig) {
		c.Enabled = func() bool { return false }
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	n.j.append(50)
	require.False(t, n.tickOnce().ran)
	require.Empty(t, logs.String(), "below the threshold there is nothing to say")
	n.j.append(50)
	require.False(t, n.tickOnce().ran)
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "no Peers")
}

// Close stops an adoption whose download hangs, and waits for it; no
// partial file is left.
func TestAdoptCloseDuringDownload(t *testing.T) {
	started := make(chan struct{}, 1)
	f := follower(t, 250, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-r.Context().Done()
		})
	})
	l := leader(t, vfs.NewMem(), []string{f.addr()})
	l.j.append(300)
	l.clock.tick(time.Minute)
	<-started
	require.NoError(t, l.cp.Close())
	r := <-l.ticks
	require.ErrorIs(t, r.err, context.Canceled)
	require.Empty(t, imageFiles(t, l.fs, "/data/image"))
	require.Empty(t, l.j.recordedImages())
}

// A crash at every filesystem step of an adoption (download, sync, rename,
// directory sync, promotion, prune) leaves a data dir that opens with
// every acknowledged write.
func TestCrashDuringAdopt(t *testing.T) {
	src := follower(t, 300, nil)
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			for step := 1; ; step++ {
				mem := vfs.NewCrashableMem()
				c := &crasher{mem: mem, at: step, unsynced: v.unsynced, rng: rand.New(rand.NewPCG(uint64(step), 1))}
				n := leader(t, errorfs.Wrap(mem, c), []string{src.addr()})
				c.snapshot = n.j.Compacted
				n.j.append(100)
				_, err := n.cp.Checkpoint(context.Background())
				require.NoError(t, err)
				n.j.append(40)
				_, err = n.cp.Checkpoint(context.Background())
				require.NoError(t, err) // a second image, so that the prune has work
				n.j.append(210)

				c.arm()
				r := n.tickOnce()
				crashed, minIndex := c.result()
				require.NoError(t, n.cp.Close())
				require.NoError(t, n.store.Close())
				if crashed == nil {
					require.NoError(t, r.err)
					require.Equal(t, uint64(300), r.info.Index)
					require.Greater(t, step, 5, "the adoption has several steps")
					t.Logf("crashed at each of %d filesystem steps", step-1)
					return
				}
				reopen(t, crashed, n.j, minIndex, 350)
			}
		})
	}
}

// A leader whose live State is a Stager (a *catalog.Tree) adopts a peer's
// image without decoding it into a staged second catalog: adoption exists
// to spare the leader that memory, and nothing would install or drop it.
func TestAdoptStagesNothing(t *testing.T) {
	_, peer := servedCatalogImage(t, 300)

	live := catalog.New()
	store := openStore(t, vfs.NewMem(), "/data", live)
	j := newKVJournal(live)
	for _, b := range catalogBatches(t, 320) {
		j.appendData(b)
	}
	clock := newFakeClock()
	ticks := make(chan tickResult, 4)
	cfg := CheckpointerConfig{
		Store: store, Journal: j, Applied: j.Index,
		NewState:  func() State { return catalog.New() },
		Threshold: 100, Clock: clock, Logger: testLogger(t),
		Enabled: func() bool { return false },
		Peers:   func() []string { return []string{peer} },
	}
	cfg.testingKnobs.afterTick = func(ran bool, info Info, err error) { ticks <- tickResult{ran, info, err} }
	cp, err := NewCheckpointer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { cp.Close() })
	clock.tick(time.Minute)
	r := <-ticks
	require.NoError(t, r.err)
	require.Equal(t, uint64(300), r.info.Index, "adopted")
	require.Equal(t, 1, cp.Status().Adopted)

	store.mu.Lock()
	st := store.mu.staged
	store.mu.Unlock()
	require.Nil(t, st, "adoption left a decoded catalog staged")
}

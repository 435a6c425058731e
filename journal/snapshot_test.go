package journal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeImage is an image: the state machine's content at index, and the
// membership blob the journal gave for it.
type fakeImage struct {
	index      uint64
	ents       map[uint64]string
	membership []byte
}

// fakeImages implements Snapshots for one node; images of peers are found
// through the shared registry (by address), as the image package fetches
// them over HTTP.
type fakeImages struct {
	mu       sync.Mutex
	sm       func() *memSM
	images   map[uint64]fakeImage
	registry *sync.Map // addr -> *fakeImages
	fetches  int
	installs int
	requests chan struct{}
	// installErr, when set, is what Install returns.
	installErr error
}

func (f *fakeImages) RequestImage() {
	select {
	case f.requests <- struct{}{}:
	default:
	}
}

func (f *fakeImages) load(im fakeImage) {
	sm := f.sm()
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.ents = maps.Clone(im.ents)
	sm.last = im.index
}

func (f *fakeImages) LoadLatest(_ context.Context, minIndex uint64) (uint64, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best fakeImage
	for _, im := range f.images {
		if im.index >= minIndex && im.index > best.index {
			best = im
		}
	}
	if best.index == 0 {
		return 0, nil, nil
	}
	f.load(best)
	return best.index, best.membership, nil
}

func (f *fakeImages) Fetch(_ context.Context, addr string, index uint64) error {
	v, ok := f.registry.Load(addr)
	if !ok {
		return fmt.Errorf("no peer at %s", addr)
	}
	peer := v.(*fakeImages)
	peer.mu.Lock()
	im, ok := peer.images[index]
	peer.mu.Unlock()
	if !ok {
		return fmt.Errorf("peer %s has no image %d", addr, index)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[index] = im
	f.fetches++
	return nil
}

func (f *fakeImages) Install(_ context.Context, index uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.installErr != nil {
		return f.installErr
	}
	im, ok := f.images[index]
	if !ok {
		return fmt.Errorf("no local image %d", index)
	}
	f.load(im)
	f.installs++
	return nil
}

// checkpoint writes an image of n's state at its applied index the way the
// image package does: shadow replay through ReadEntries from the previous
// image, then ImageWritten.
func checkpoint(t *testing.T, n *node, imgs *fakeImages) uint64 {
	ctx := ctxT(t, 5*time.Second)
	idx := n.j.Status().Applied
	imgs.mu.Lock()
	var base fakeImage
	for _, im := range imgs.images {
		if im.index > base.index && im.index <= idx {
			base = im
		}
	}
	imgs.mu.Unlock()
	shadow := maps.Clone(base.ents)
	if shadow == nil {
		shadow = map[uint64]string{}
	}
	require.NoError(t, n.j.ReadEntries(ctx, base.index, idx, func(i uint64, data []byte) error {
		shadow[i] = string(data)
		return nil
	}))
	blob, err := n.j.membershipBlobAt(idx)
	require.NoError(t, err)
	term, err := n.j.TermAt(idx)
	require.NoError(t, err)
	imgs.mu.Lock()
	imgs.images[idx] = fakeImage{index: idx, ents: shadow, membership: blob}
	imgs.mu.Unlock()
	require.NoError(t, n.j.imageWritten(ctx, idx, term, blob))
	return idx
}

// imagesFor returns a function that gives a node its fakeImages (kept in
// imgs by id, found by peers through one registry) and the options using
// them, with CompactMargin and DedupeWindow set to window.
func imagesFor(imgs map[uint64]*fakeImages, window uint64) func(n *node) func(*Config) {
	registry := &sync.Map{}
	return func(n *node) func(*Config) {
		f := &fakeImages{sm: func() *memSM { return n.sm }, images: map[uint64]fakeImage{}, registry: registry, requests: make(chan struct{}, 1)}
		imgs[n.id] = f
		registry.Store(n.addr, f)
		return func(cfg *Config) {
			cfg.Snapshots, cfg.CompactMargin, cfg.DedupeWindow = f, window, window
		}
	}
}

func TestSnapshotCatchUpAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		imgs := map[uint64]*fakeImages{}
		withImages := imagesFor(imgs, 4)
		n1 := c.listen(1)
		opt1 := withImages(n1)
		require.NoError(t, c.open(n1, func(cfg *Config) { opt1(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)
		n2 := c.listen(2)
		opt2 := withImages(n2)
		require.NoError(t, c.open(n2, func(cfg *Config) { opt2(cfg); cfg.Join = n1.addr }))

		key := [16]byte{9}
		for i := range 30 {
			propose(t, c.nodes[uint64(1+i%2)], fmt.Sprintf("v%d", i))
		}
		_, _, err := n1.j.ProposeWithKey(ctxT(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		// No compaction while a snapshot transfer is in flight.
		n1.j.snapsOut.Add(1)
		img := checkpoint(t, n1, imgs[1])
		first, err := n1.j.store.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, uint64(1), first, "log kept while a snapshot is in flight")
		n1.j.snapsOut.Add(-1)
		img = checkpoint(t, n1, imgs[1]) // the same index, or later (leader timestamps)
		require.Equal(t, img, n1.j.Status().Image)
		// The log is compacted only up to an image: with none at least the
		// margin behind the newest, it is kept whole.
		first, err = n1.j.store.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, uint64(1), first, "log compacted with no image the margin behind the newest")
		for i := range 5 {
			propose(t, n1, fmt.Sprintf("w%d", i))
		}
		newest := checkpoint(t, n1, imgs[1])
		first, err = n1.j.store.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, img+1, first, "log compacted up to the image the margin behind the newest %d", newest)
		got, err := n1.j.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, first, got)
		_, err = n1.j.TermAt(first - 2)
		require.ErrorIs(t, err, ErrCompacted)

		// A new observer needs entries the leader no longer has: it is sent the
		// image, fetches it, installs it, and replays the rest.
		n3 := c.listen(3)
		opt3 := withImages(n3)
		require.NoError(t, c.open(n3, func(cfg *Config) { opt3(cfg); cfg.Join = n1.addr; cfg.Role = Observer }))
		// The image predates node 3, so raft on node 3 could not use it: the
		// journal asks the hook for a new image instead of sending it.
		select {
		case <-imgs[1].requests:
		case <-time.After(10 * time.Second):
			t.Fatal("no image requested")
		}
		checkpoint(t, n1, imgs[1])
		propose(t, n1, "after-image")
		require.NoError(t, n3.j.ReadBarrier(ctxT(t, 10*time.Second)))
		require.Equal(t, 1, imgs[3].fetches)
		require.Equal(t, 1, imgs[3].installs)
		// raft heard how the transfer ended (ReportSnapshot), so compaction is
		// allowed again.
		await(t, 5*time.Second, "no snapshot in flight", n1.changed, func() bool { return n1.j.snapsOut.Load() == 0 })
		require.Equal(t, n1.sm.values(), n3.sm.values())
		// The dedupe window came with the image: a retry of the keyed write
		// right after it is skipped on the new node too.
		_, _, err = n3.j.ProposeWithKey(ctxT(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		propose(t, n1, "barrier")
		require.NoError(t, n3.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.Equal(t, n1.sm.values(), n3.sm.values())
		require.Equal(t, n1.sm.values(), n2.sm.values())
		// A shadow checkpoint on the new node, from the image it installed,
		// decides the retry as its live applier did: its log starts after the
		// image, so the image's window seeds the replay.
		var replayed []string
		st3 := n3.j.Status()
		require.NoError(t, n3.j.ReadEntries(ctxT(t, 5*time.Second), st3.Image, st3.Applied, func(_ uint64, data []byte) error {
			replayed = append(replayed, string(data))
			return nil
		}))
		require.NotEmpty(t, replayed)
		// The retry lands within the window of the first copy unless leader
		// timestamps pushed it out; either way the replay decides as the
		// live applier did.
		keyed := 0
		for _, v := range n3.sm.values() {
			if v == "keyed" {
				keyed++
			}
		}
		appliedAgain := keyed > 1
		require.Equal(t, appliedAgain, slices.Contains(replayed, "keyed"),
			"the replay after the image %v decides the retry unlike the live applier (applied again: %v)", replayed, appliedAgain)

		// Restarts load the newest image and replay the log after it.
		for _, n := range []*node{n1, n3} {
			n.closeJournal()
			n.sm = newMemSM()
			opt := map[uint64]func(*Config){1: opt1, 3: opt3}[n.id]
			require.NoError(t, c.open(n, opt))
			require.NoError(t, n.j.ReadBarrier(ctxT(t, 10*time.Second)))
			require.NoError(t, n2.j.ReadBarrier(ctxT(t, 10*time.Second)))
			require.Equal(t, n2.sm.values(), n.sm.values(), "node %d after restart", n.id)
		}
		propose(t, n3, "end")
	})
}

// A keyed write retried three times, the third copy just outside the window
// of the applied copy but inside that of the skipped second one: the live
// applier, a shadow checkpoint replay (ReadEntries) and a restart from an
// image taken between the copies decide it the same way (the window slides
// to the latest copy, so it is skipped everywhere).
func TestDedupeAgreesAcrossRestartAndShadowReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 4
		c, n1, imgs, opt := soleVoterWithImages(t, window)
		ctx := ctxT(t, 10*time.Second)
		key := [16]byte{42}
		i1, _, err := n1.j.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		got, _, err := n1.j.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, i1, got, "a retry answers with the applied copy's index")
		i2 := n1.j.Status().Applied
		require.Equal(t, i1+1, i2)
		img := checkpoint(t, n1, imgs)
		require.Equal(t, i2, img)
		for i := 0; ; i++ {
			if idx := propose(t, n1, fmt.Sprintf("f%d", i)); idx >= i1+window {
				require.Equal(t, i1+window, idx)
				break
			}
		}
		got, _, err = n1.j.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, i1, got, "the third copy is within the window of the second")
		live := n1.sm.values()
		copies := 0
		for _, v := range live {
			if v == "k" {
				copies++
			}
		}
		require.Equal(t, 1, copies, "live: %v", live)

		// The shadow replay from the image applies what the live applier did
		// after it: the fillers only.
		var shadow []string
		require.NoError(t, n1.j.ReadEntries(ctx, img, n1.j.Status().Applied, func(_ uint64, data []byte) error {
			shadow = append(shadow, string(data))
			return nil
		}))
		require.Equal(t, live[len(live)-len(shadow):], shadow)
		require.NotContains(t, shadow, "k")

		// A restart from the image replays to the same state.
		n1.closeJournal()
		n1.sm = newMemSM()
		require.NoError(t, c.open(n1, opt))
		require.NoError(t, n1.j.ReadBarrier(ctxT(t, 10*time.Second)))
		require.Equal(t, live, n1.sm.values())
	})
}

// When the applier fails (here: the image install a catching-up observer
// needs), the node's proposers and WaitApplied get that failure at once
// rather than waiting for an apply that never comes.
func TestApplierFailureFailsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		registry := &sync.Map{}
		withImages := func(n *node) (*fakeImages, func(*Config)) {
			f := &fakeImages{sm: func() *memSM { return n.sm }, images: map[uint64]fakeImage{}, registry: registry, requests: make(chan struct{}, 1)}
			registry.Store(n.addr, f)
			return f, func(cfg *Config) {
				cfg.Snapshots = f
				cfg.CompactMargin = 4
				cfg.DedupeWindow = 4
			}
		}
		n1 := c.listen(1)
		imgs1, opt1 := withImages(n1)
		require.NoError(t, c.open(n1, func(cfg *Config) { opt1(cfg); cfg.Bootstrap = true }))
		c.waitLeader(1)
		for i := range 20 {
			propose(t, n1, fmt.Sprintf("v%d", i))
		}
		checkpoint(t, n1, imgs1)
		for i := range 5 {
			propose(t, n1, fmt.Sprintf("w%d", i))
		}
		checkpoint(t, n1, imgs1) // compacts up to the first: a new node needs an image

		n2 := c.listen(2)
		imgs2, opt2 := withImages(n2)
		imgs2.installErr = errors.New("disk full")
		require.NoError(t, c.open(n2, func(cfg *Config) { opt2(cfg); cfg.Join = n1.addr; cfg.Role = Observer }))
		// A write through the observer waits for its local apply, which needs
		// the image first.
		waiting := make(chan error, 1)
		go func() {
			_, _, err := n2.j.Propose(ctxT(t, 30*time.Second), []byte("during"))
			waiting <- err
		}()
		// Answer every image request until the leader has one it can send; the
		// observer's applier then fails to install it, which fails the waiting
		// proposer (after the failure is recorded for Status).
		deadline := time.NewTimer(10 * time.Second)
		defer deadline.Stop()
		for failed := false; !failed; {
			select {
			case <-imgs1.requests:
				checkpoint(t, n1, imgs1)
			case err := <-waiting:
				require.ErrorIs(t, err, ErrClosed)
				require.ErrorContains(t, err, "disk full")
				failed = true
			case <-deadline.C:
				t.Fatal("the waiting proposer was not told of the applier's failure")
			}
		}
		require.ErrorContains(t, n2.j.Status().Err, "disk full")

		_, _, err := n2.j.Propose(ctxT(t, 10*time.Second), []byte("after"))
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorContains(t, err, "disk full")
		err = n2.j.WaitApplied(ctxT(t, 10*time.Second), n1.j.Status().Applied+1000)
		require.ErrorContains(t, err, "disk full")
		// The leader is unaffected.
		propose(t, n1, "still")
	})
}

// installCount is how many images the node installed.
func (f *fakeImages) installCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.installs
}

// TestReplayFromTheImageTheLogStartsAfterDecidesAsTheApplier writes a keyed
// entry, an image right after it, a retry of the entry (a duplicate the
// live applier skips) and a second image that compacts the log up to the
// first. A replay from the first image (ReadEntries(FirstIndex()-1, …), as
// the checkpointer falling back to an older image and a resumed watch do)
// takes the compacted part of the dedupe window from that image and skips
// the retry too.
func TestReplayFromTheImageTheLogStartsAfterDecidesAsTheApplier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 4
		c, n1, imgs, opt := soleVoterWithImages(t, window)
		ctx := ctxT(t, 10*time.Second)
		key := [16]byte{7, 7}
		i1, _, err := n1.j.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		first := checkpoint(t, n1, imgs)
		require.Equal(t, i1, first, "the first image is right after the keyed entry")
		got, _, err := n1.j.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, i1, got, "the retry is a duplicate for the live applier")
		require.Equal(t, i1+1, n1.j.Status().Applied, "the retry reached the log right after the image")
		for i := 0; n1.j.Status().Applied < first+window; i++ {
			propose(t, n1, fmt.Sprintf("f%d", i))
		}
		checkpoint(t, n1, imgs)
		start, err := n1.j.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, first+1, start, "the second image compacts the log up to the first")

		live := n1.sm.values()
		require.Equal(t, "k", live[0], "live: %v", live)
		require.NotContains(t, live[1:], "k", "live: the keyed entry applied once")
		var replayed []string
		require.NoError(t, n1.j.ReadEntries(ctx, first, n1.j.Status().Applied, func(_ uint64, data []byte) error {
			replayed = append(replayed, string(data))
			return nil
		}))
		require.Equal(t, live[1:], replayed, "the replay from the image at %d applies what the live applier applied after it", first)

		// A restart (the newest image, then the log) keeps deciding alike.
		n1.closeJournal()
		n1.sm = newMemSM()
		require.NoError(t, c.open(n1, opt))
		require.NoError(t, n1.j.ReadBarrier(ctxT(t, 10*time.Second)))
		replayed = replayed[:0]
		require.NoError(t, n1.j.ReadEntries(ctx, first, n1.j.Status().Applied, func(_ uint64, data []byte) error {
			replayed = append(replayed, string(data))
			return nil
		}))
		require.Equal(t, live[1:], replayed, "after a restart")

		// Without the window recorded at the log's start, a replay from there
		// fails instead of deciding the retry otherwise.
		blob, err := n1.j.store.MembershipAt(first)
		require.NoError(t, err)
		m, err := decodeMembership(blob)
		require.NoError(t, err)
		m.Index, m.Keys = first-1, nil
		require.NoError(t, n1.j.store.SaveMembership(first, m.encode()))
		err = n1.j.ReadEntries(ctx, first, n1.j.Status().Applied, func(uint64, []byte) error { return nil })
		require.ErrorIs(t, err, ErrCompacted)
	})
}

// soleVoterWithImages bootstraps node 1 alone, leading, with fake images,
// a compaction margin and dedupe window of window entries, and no leader
// timestamps between copies; opt reopens it alike.
func soleVoterWithImages(t *testing.T, window uint64) (*cluster, *node, *fakeImages, func(*Config)) {
	t.Helper()
	c := newCluster(t)
	registry := &sync.Map{}
	n1 := c.listen(1)
	imgs := &fakeImages{sm: func() *memSM { return n1.sm }, images: map[uint64]fakeImage{}, registry: registry, requests: make(chan struct{}, 1)}
	registry.Store(n1.addr, imgs)
	opt := func(cfg *Config) {
		cfg.Snapshots = imgs
		cfg.CompactMargin = window
		cfg.DedupeWindow = window
		cfg.StaleAfter = time.Hour
	}
	require.NoError(t, c.open(n1, func(cfg *Config) { opt(cfg); cfg.Bootstrap = true }))
	c.waitLeader(1)
	return c, n1, imgs, opt
}

package journal_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// fakeImage is an image: the state machine's content at index, and the
// membership blob the journal gave for it.
type fakeImage struct {
	index      uint64
	ents       map[uint64]string
	membership []byte
}

// fakeImages implements journal.Snapshots for one node; images of peers
// are found through the shared registry (by address), as the image
// package fetches them over HTTP. It loads images into the memSM of the
// node's current run (bind).
type fakeImages struct {
	mu       sync.Mutex
	sm       *memSM
	images   map[uint64]fakeImage
	registry *sync.Map // addr -> *fakeImages
	fetches  int
	installs int
	requests chan struct{}
	// installErr, when set, is what Install returns.
	installErr error
}

func newFakeImages(registry *sync.Map) *fakeImages {
	return &fakeImages{images: map[uint64]fakeImage{}, registry: registry, requests: make(chan struct{}, 1)}
}

// bind makes f the Snapshots of cfg, loading into its state machine: a
// *memSM or one that embeds it.
func (f *fakeImages) bind(cfg *journal.Config) {
	sm, ok := cfg.StateMachine.(interface{ mem() *memSM })
	if !ok {
		panic(fmt.Sprintf("fakeImages: state machine %T has no memSM", cfg.StateMachine))
	}
	f.mu.Lock()
	f.sm = sm.mem()
	f.mu.Unlock()
	f.registry.Store(cfg.Addr, f)
	cfg.Snapshots = f
}

func (f *fakeImages) RequestImage() {
	select {
	case f.requests <- struct{}{}:
	default:
	}
}

// load replaces the state machine's content with im's; f.mu is held.
func (f *fakeImages) load(im fakeImage) {
	f.sm.mu.Lock()
	defer f.sm.mu.Unlock()
	f.sm.ents = maps.Clone(im.ents)
	f.sm.last = im.index
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

// installCount is how many images the node installed.
func (f *fakeImages) installCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.installs
}

// fetchCount is how many images the node fetched from a peer.
func (f *fakeImages) fetchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches
}

// image returns the image f holds at index.
func (f *fakeImages) image(index uint64) (fakeImage, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	im, ok := f.images[index]
	return im, ok
}

// put stores im as an image f holds.
func (f *fakeImages) put(im fakeImage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[im.index] = im
}

// checkpoint writes an image of n's state at its applied index the way the
// image package does: shadow replay through ReadEntries from the previous
// image, then ImageWritten.
func checkpoint(t *testing.T, n *journaltest.Node, imgs *fakeImages) uint64 {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	j := n.Journal()
	idx := j.Status().Applied
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
	require.NoError(t, j.ReadEntries(ctx, base.index, idx, func(i uint64, data []byte) error {
		shadow[i] = string(data)
		return nil
	}))
	blob, err := j.MembershipBlobAtForTest(idx)
	require.NoError(t, err)
	term, err := j.TermAt(idx)
	require.NoError(t, err)
	imgs.put(fakeImage{index: idx, ents: shadow, membership: blob})
	require.NoError(t, j.ImageWrittenForTest(ctx, idx, term, blob))
	return idx
}

// bubbleImages holds each node's fakeImages of an httpBubble (by id,
// found by peers through one registry), and the CompactMargin and
// DedupeWindow of the nodes, window.
type bubbleImages struct {
	window   uint64
	registry sync.Map
	mu       sync.Mutex
	byID     map[uint64]*fakeImages
}

func newBubbleImages(window uint64) *bubbleImages {
	return &bubbleImages{window: window, byID: map[uint64]*fakeImages{}}
}

// of returns node id's fakeImages, made at the first call.
func (b *bubbleImages) of(id uint64) *fakeImages {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.byID[id]
	if f == nil {
		f = newFakeImages(&b.registry)
		b.byID[id] = f
	}
	return f
}

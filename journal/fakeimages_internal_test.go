package journal

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
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
// them over HTTP. The cluster tests in journal_test have their own
// (fakeimages_test.go); these are for the internal tests that open a
// journal alone.
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

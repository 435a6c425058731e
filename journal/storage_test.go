package journal

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
)

// blockingRequester is an image hook whose RequestImage takes a while.
type blockingRequester struct {
	*fakeImages
	entered  chan struct{}
	once     sync.Once
	release  chan struct{}
	returned atomic.Bool
}

func (b *blockingRequester) RequestImage() {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	b.returned.Store(true)
}

// raft asking for an image that predates a member calls the hook on a
// goroutine the journal owns: Close waits for it to return.
func TestImageRequestIsOwnedByTheJournal(t *testing.T) {
	c := newCluster(t)
	n1 := c.listen(1)
	req := &blockingRequester{
		fakeImages: &fakeImages{sm: func() *memSM { return n1.sm }, images: map[uint64]fakeImage{}, registry: &sync.Map{}},
		entered:    make(chan struct{}),
		release:    make(chan struct{}),
	}
	require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Snapshots = req; cfg.Bootstrap = true }))
	c.waitLeader(1)
	propose(t, n1, "a")
	checkpoint(t, n1, req.fakeImages)
	j := n1.j
	// A member the image does not know: raft cannot send that image.
	j.mu.Lock()
	m := j.mu.membership.clone()
	m.Members[99] = Member{ID: 99, Addr: "nowhere:1", Role: Observer}
	j.mu.membership = m
	j.mu.Unlock()
	_, err := raftStorage{Store: j.store, j: j}.Snapshot()
	require.ErrorIs(t, err, raft.ErrSnapshotTemporarilyUnavailable)
	<-req.entered
	// The hook returns a moment after Close began; Close must wait.
	time.AfterFunc(100*time.Millisecond, func() { close(req.release) })
	n1.closeJournal()
	require.True(t, req.returned.Load(), "Close returned while RequestImage was still running")
}

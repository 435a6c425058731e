package journal

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"

	"github.com/metatree/metatree/internal/durable"
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
// goroutine the journal owns: Close waits for it to return. The node runs
// in a synctest bubble on an in-memory filesystem, so synctest.Wait shows
// Close blocked while the hook still runs, rather than a delay making it
// likely.
func TestImageRequestIsOwnedByTheJournal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := vfs.NewMem()
		require.NoError(t, durable.MkdirAll(fs, "/n1"))
		n1 := &node{t: t, id: 1, sm: newMemSM()}
		req := &blockingRequester{
			fakeImages: &fakeImages{sm: func() *memSM { return n1.sm }, images: map[uint64]fakeImage{}, registry: &sync.Map{}},
			entered:    make(chan struct{}),
			release:    make(chan struct{}),
		}
		cfg := Config{
			ID: 1, Dir: "/n1", Addr: "n1", FS: fs, Token: "secret",
			StateMachine: n1.sm, Snapshots: req, Bootstrap: true,
			TickInterval: testTick, ElectionTicks: testElectionTicks, HeartbeatTicks: 2,
			StaleAfter: 300 * time.Millisecond,
		}
		j, err := Open(t.Context(), cfg)
		require.NoError(t, err)
		n1.j = j
		for {
			changed := j.Leadership() // subscribe before checking
			if j.Status().IsLeader() {
				break
			}
			<-changed
		}
		propose(t, n1, "a")
		checkpoint(t, n1, req.fakeImages)
		// A member the image does not know: raft cannot send that image.
		j.mu.Lock()
		m := j.mu.membership.Clone()
		m.Members[99] = Member{ID: 99, Addr: "nowhere:1", Role: Observer}
		j.mu.membership = m
		j.mu.Unlock()
		_, err = raftStorage{Store: j.store, j: j}.Snapshot()
		require.ErrorIs(t, err, raft.ErrSnapshotTemporarilyUnavailable)
		<-req.entered

		closed := make(chan error, 1)
		go func() { closed <- j.Close() }()
		synctest.Wait() // every goroutine of the bubble is blocked
		select {
		case <-closed:
			t.Fatal("Close returned while RequestImage was still running")
		default:
		}
		close(req.release)
		require.NoError(t, <-closed)
		require.True(t, req.returned.Load(), "Close returned while RequestImage was still running")
	})
}

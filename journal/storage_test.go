package journal_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
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
		req := &blockingRequester{
			fakeImages: newFakeImages(&sync.Map{}),
			entered:    make(chan struct{}),
			release:    make(chan struct{}),
		}
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters:          1,
			NewStateMachine: func(uint64) journal.StateMachine { return newMemSM() },
			Configure: func(cfg *journal.Config) {
				cfg.Token = "secret"
				cfg.StaleAfter = 300 * time.Millisecond
				req.bind(cfg)
				cfg.Snapshots = req
			},
		})
		n1 := c.Node(1)
		j := n1.Journal()
		propose(t, n1, "a")
		checkpoint(t, n1, req.fakeImages)
		// A member the image does not know: raft cannot send that image.
		j.AddMemberWithoutRaftForTest(journal.Member{ID: 99, Addr: "nowhere:1", Role: journal.Observer})
		_, err := j.RaftSnapshotForTest()
		require.ErrorIs(t, err, raft.ErrSnapshotTemporarilyUnavailable)
		<-req.entered

		closed := make(chan error, 1)
		go func() { closed <- c.Stop(1) }()
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

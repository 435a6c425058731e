package journal

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/durable"
)

// haltingImages is a Snapshots hook that is a HaltSource: halt closes its
// channel, as *image.Store does when an image fsync fails.
type haltingImages struct {
	*fakeImages
	haltc chan struct{}
	cause error
}

func (h *haltingImages) Halting() <-chan struct{} { return h.haltc }
func (h *haltingImages) Halted() error {
	select {
	case <-h.haltc:
		return h.cause
	default:
		return nil
	}
}

// A Snapshots hook that halts halts the journal with its cause, with no
// wiring by the host: whether it halted before Open or while the journal
// runs, later proposals fail with ErrHalted wrapping the hook's cause.
func TestSnapshotsHaltSourceHaltsTheJournal(t *testing.T) {
	for _, before := range []bool{false, true} {
		t.Run(map[bool]string{false: "while open", true: "before open"}[before], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := vfs.NewMem()
				require.NoError(t, durable.MkdirAll(fs, "/n1"))
				n1 := &node{t: t, id: 1, sm: newMemSM()}
				cause := errors.New("image fsync failed")
				hook := &haltingImages{
					fakeImages: &fakeImages{sm: func() *memSM { return n1.sm }, images: map[uint64]fakeImage{}, registry: &sync.Map{}},
					haltc:      make(chan struct{}),
					cause:      cause,
				}
				if before {
					close(hook.haltc)
				}
				j, err := Open(t.Context(), Config{
					ID: 1, Dir: "/n1", Addr: "n1", FS: fs, Token: "secret",
					StateMachine: n1.sm, Snapshots: hook, Bootstrap: true,
					TickInterval: testTick, ElectionTicks: testElectionTicks, HeartbeatTicks: 2,
					StaleAfter: 300 * time.Millisecond,
				})
				require.NoError(t, err)
				n1.j = j
				if !before {
					close(hook.haltc)
				}
				synctest.Wait() // the watcher has seen the channel closed
				_, _, err = j.Propose(t.Context(), []byte("after the halt"))
				require.ErrorIs(t, err, ErrHalted)
				require.ErrorIs(t, err, cause)
				require.NoError(t, j.Close())
			})
		})
	}
}

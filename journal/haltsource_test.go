package journal_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/journal"
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
				cause := errors.New("image fsync failed")
				hook := &haltingImages{
					fakeImages: newFakeImages(&sync.Map{}),
					haltc:      make(chan struct{}),
					cause:      cause,
				}
				if before {
					close(hook.haltc)
				}
				cfg := journal.Config{
					ID: 1, Dir: "/n1", Addr: "n1", FS: fs, Token: "secret",
					StateMachine: newMemSM(), Bootstrap: true,
					TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
					StaleAfter: 300 * time.Millisecond,
				}
				hook.bind(&cfg) // images load into cfg's state machine
				cfg.Snapshots = hook
				j, err := journal.Open(t.Context(), cfg)
				require.NoError(t, err)
				if !before {
					close(hook.haltc)
				}
				synctest.Wait() // the watcher has seen the channel closed
				_, _, err = j.Propose(t.Context(), []byte("after the halt"))
				require.ErrorIs(t, err, journal.ErrHalted)
				require.ErrorIs(t, err, cause)
				require.NoError(t, j.Close())
			})
		})
	}
}

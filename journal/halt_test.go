package journal_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/internal/logtest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// walSyncFault fails every fsync of a WAL file under the journal's Pebble
// dir once armed.
type walSyncFault struct{ armed atomic.Bool }

func (f *walSyncFault) String() string { return "walSyncFault" }

func (f *walSyncFault) MaybeError(op errorfs.Op) error {
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	if f.armed.Load() && sync && strings.Contains(op.Path, "/journal/") && strings.HasSuffix(op.Path, ".log") {
		return errorfs.ErrInjected
	}
	return nil
}

// offsetClock is the default clock (the bubble's, in a synctest test)
// whose Now is moved forward by a settable offset; its timers are the
// default ones.
type offsetClock struct {
	clock.Real
	offset atomic.Int64
}

func (c *offsetClock) Now() time.Time { return c.Real.Now().Add(time.Duration(c.offset.Load())) }

// TestFailedWALSyncHaltsTheNode: once a WAL fsync fails, the write that hit
// it fails with ErrHalted naming the operation and the file, and so does
// every later write although the disk works again; reads go on under the
// staleness guard; Close returns; the restarted node has every
// acknowledged write and takes writes again.
func TestFailedWALSyncHaltsTheNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fault := &walSyncFault{}
		clock := &offsetClock{}
		var restarted atomic.Bool
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, OnDisk: true, Configure: func(cfg *journal.Config) {
			if restarted.Load() {
				return // the restart runs on the plain disk and clock
			}
			cfg.FS = errorfs.Wrap(cfg.FS, fault)
			cfg.Clock = clock
			cfg.StaleAfter = 10 * time.Second // fresh throughout, until the clock is moved
		}})
		ctx := ctxFor(t, time.Minute)
		n := c.Node(1)
		proposeVia(ctx, t, n, "a")
		proposeVia(ctx, t, n, "b")

		fault.armed.Store(true)
		_, _, err := n.Journal().Propose(ctx, []byte("c"))
		require.ErrorIs(t, err, journal.ErrHalted)
		require.ErrorIs(t, err, journal.ErrClosed, "a halted node is not worth retrying")
		require.ErrorIs(t, err, errorfs.ErrInjected)
		require.Regexp(t, `sync \S+/journal/\d+\.log`, err.Error())

		fault.armed.Store(false)
		_, _, err = n.Journal().Propose(ctx, []byte("d"))
		require.ErrorIs(t, err, journal.ErrHalted, "the disk works again, but the node needs a restart")
		require.ErrorIs(t, n.Journal().Status().Err, journal.ErrHalted)
		rec := httptest.NewRecorder()
		journal.WriteErrorForTest(rec, err)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Contains(t, rec.Body.String(), `"halted"`)

		// Reads go on while the replayed state is fresh, and stop being fresh
		// once StaleAfter passes without the leader's clock.
		require.NoError(t, n.Journal().CheckFresh())
		require.True(t, applied(n, "a") && applied(n, "b"))
		clock.offset.Store(int64(time.Minute))
		require.ErrorIs(t, n.Journal().CheckFresh(), journal.ErrStale)

		j := n.Journal()
		_ = c.Stop(1) // may repeat the failure; it must return
		require.NoError(t, j.Close(), "Close is idempotent")

		restarted.Store(true)
		require.NoError(t, c.Restart(ctx, 1))
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		require.True(t, applied(n, "a") && applied(n, "b"), "acknowledged writes survive: %v", appliedData(n))
		require.False(t, applied(n, "d"), "a write refused after the halt never applies")
		proposeVia(ctx, t, n, "e")
	})
}

// pebbleFault fails the operations match selects on the journal's Pebble
// dir once armed.
type pebbleFault struct {
	armed atomic.Bool
	match func(errorfs.Op) bool
}

func (f *pebbleFault) String() string { return "pebbleFault" }

func (f *pebbleFault) MaybeError(op errorfs.Op) error {
	if f.armed.Load() && strings.Contains(op.Path, "/journal/") && f.match(op) {
		return errorfs.ErrInjected
	}
	return nil
}

// TestPebbleFailureHaltsTheNode: an I/O error in Pebble past the WAL
// fsync, where Pebble itself would panic (creating the next WAL when the
// memtable fills) or fail in the background (the MANIFEST write of the
// flush that follows), halts the node: writes fail with ErrHalted naming
// the operation and the file, reads go on under the staleness guard,
// Close returns, and the restarted node has every acknowledged write and
// takes writes again.
func TestPebbleFailureHaltsTheNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		match func(errorfs.Op) bool
		re    string
	}{
		{"next WAL", func(op errorfs.Op) bool { return op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".log") },
			`create \S+/journal/\d+\.log`},
		{"MANIFEST", func(op errorfs.Op) bool {
			return strings.Contains(op.Path, "MANIFEST-") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSync)
		}, `(write|sync) \S+/journal/MANIFEST-\d+`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fault := &pebbleFault{match: tc.match}
				var restarted atomic.Bool
				c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, OnDisk: true, Configure: func(cfg *journal.Config) {
					if restarted.Load() {
						return // the restart runs on the plain disk
					}
					cfg.FS = errorfs.Wrap(cfg.FS, fault)
					cfg.StaleAfter = 10 * time.Second // fresh throughout
				}})
				ctx := ctxFor(t, time.Minute)
				n := c.Node(1)
				proposeVia(ctx, t, n, "a")

				// Entries of the largest size fill Pebble's memtable: it rotates
				// the WAL on the journal's append goroutine and flushes the old
				// memtable in the background.
				fault.armed.Store(true)
				var acked []string
				var err error
				for i := 0; err == nil && i < 100; i++ {
					v := fmt.Sprintf("%03d", i) + strings.Repeat("x", int(n.Journal().MaxEntryBytesForTest())-3)
					if _, _, err = n.Journal().Propose(ctx, []byte(v)); err == nil {
						acked = append(acked, v)
					}
				}
				fault.armed.Store(false)
				require.ErrorIs(t, err, journal.ErrHalted)
				require.ErrorIs(t, err, errorfs.ErrInjected)
				require.Regexp(t, tc.re, err.Error())
				require.ErrorIs(t, n.Journal().Status().Err, journal.ErrHalted)
				_, _, err = n.Journal().Propose(ctx, []byte("late"))
				require.ErrorIs(t, err, journal.ErrHalted)
				require.NoError(t, n.Journal().CheckFresh(), "reads go on")
				require.True(t, applied(n, "a"))

				_ = c.Stop(1) // may repeat the failure; it must return

				restartAfterHalt(ctx, t, c, n, &restarted, acked)
				proposeVia(ctx, t, n, "b")
			})
		})
	}
}

// flushWatch fails reads of the journal's sstables once armed, and closes
// flushed when Pebble first syncs its MANIFEST after creating an sstable
// (a flush was installed).
type flushWatch struct {
	armed   atomic.Bool
	created atomic.Bool
	once    sync.Once
	flushed chan struct{}
}

func (f *flushWatch) String() string { return "flushWatch" }

func (f *flushWatch) MaybeError(op errorfs.Op) error {
	if !strings.Contains(op.Path, "/journal/") {
		return nil
	}
	switch {
	case op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst"):
		f.created.Store(true)
	case op.Kind == errorfs.OpFileSync && strings.Contains(op.Path, "MANIFEST-") && f.created.Load():
		f.once.Do(func() { close(f.flushed) })
	case f.armed.Load() && strings.HasSuffix(op.Path, ".sst") && (op.Kind == errorfs.OpFileRead || op.Kind == errorfs.OpFileReadAt):
		return errorfs.ErrInjected
	}
	return nil
}

// TestFailedLogReadHaltsTheLeader: the leader reads old entries from its
// sstables to catch a returning follower up, and the read fails on the
// disk. Raft panics on a storage error; the journal recovers that panic,
// since the store halted, and stops the node as after a failed write:
// the process lives, writes fail with ErrHalted, Close returns, and the
// restarted node has every acknowledged write.
func TestFailedLogReadHaltsTheLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logtest.Warnings{}
		watch := &flushWatch{flushed: make(chan struct{})}
		var restarted atomic.Bool
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, OnDisk: true, Configure: func(cfg *journal.Config) {
			if cfg.ID != 1 || restarted.Load() {
				return // the others, and node 1's restart, run on the plain disk
			}
			cfg.FS = errorfs.Wrap(cfg.FS, watch)
			cfg.Logger = slog.New(logs)
		}})
		ctx := ctxFor(t, time.Minute)
		n1, n3 := c.Node(1), c.Node(3)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader, "the bootstrapping node leads")
		proposeVia(ctx, t, n1, "a")
		require.NoError(t, n3.Journal().ReadBarrier(ctx))
		require.NoError(t, c.Stop(3))

		// More than the leader's entry cache and memtable hold: the oldest
		// entries are read back from an sstable once flushed.
		var acked []string
		for i := 0; i < 30; i++ {
			v := fmt.Sprintf("%03d", i) + strings.Repeat("x", int(n1.Journal().MaxEntryBytesForTest())-3)
			_, _, err := n1.Journal().Propose(ctx, []byte(v))
			require.NoError(t, err)
			acked = append(acked, v)
		}
		select {
		case <-watch.flushed:
		case <-ctx.Done():
			t.Fatal("no flush")
		}
		watch.armed.Store(true)
		require.NoError(t, c.Restart(ctx, 3))
		select {
		case <-n1.Journal().HaltedForTest():
		case <-ctx.Done():
			t.Fatal("the failed read did not halt the leader")
		}
		watch.armed.Store(false)
		_, _, err = n1.Journal().Propose(ctx, []byte("late"))
		require.ErrorIs(t, err, journal.ErrHalted)
		require.ErrorIs(t, err, errorfs.ErrInjected)

		_ = c.Stop(1) // the loop stopped; Close returns
		require.Equal(t, 1, logs.Count("raft stopped on a storage failure"), "raft's panic was recovered")

		// The restarted leader replays some 45 MB of entries, and the node it
		// left catches up on as much.
		restartAfterHalt(ctx, t, c, n1, &restarted, acked)
	})
}

// restartAfterHalt restarts the halted node n of c once restarted is set
// (the cluster's Configure then leaves the faulty disk out), and checks
// that it holds the write "a" and every acknowledged one, and not the
// write "late" it refused.
func restartAfterHalt(ctx context.Context, t *testing.T, c *journaltest.Cluster, n *journaltest.Node, restarted *atomic.Bool, acked []string) {
	t.Helper()
	restarted.Store(true)
	require.NoError(t, c.Restart(ctx, n.ID))
	require.NoError(t, n.Journal().ReadBarrier(ctx))
	require.True(t, applied(n, "a"))
	for _, v := range acked {
		require.True(t, applied(n, v), "acknowledged write %s survives", v[:3])
	}
	require.False(t, applied(n, "late"))
}

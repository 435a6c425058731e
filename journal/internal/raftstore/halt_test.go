package raftstore

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
)

// faultAfterArm injects errorfs.ErrInjected into the operations match
// selects, once armed.
type faultAfterArm struct {
	armed atomic.Bool
	match func(errorfs.Op) bool
}

func (f *faultAfterArm) String() string { return "faultAfterArm" }

func (f *faultAfterArm) MaybeError(op errorfs.Op) error {
	if f.armed.Load() && f.match(op) {
		return errorfs.ErrInjected
	}
	return nil
}

func isSync(op errorfs.Op) bool {
	return op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
}

func isWALOp(op errorfs.Op) bool { return isWAL(op.Path) }

// TestFailedWALSyncHaltsTheStore: a WAL fsync that fails is never taken
// for a success. The Append that hit it fails with an error naming the
// operation and the file, every later write is refused although the disk
// works again (no fsync retry can vouch for the pages the failed one
// dropped), reads of what was acknowledged go on, Close returns, and the
// reopened store holds everything acknowledged.
func TestFailedWALSyncHaltsTheStore(t *testing.T) {
	mem := vfs.NewMem()
	fault := &faultAfterArm{match: func(op errorfs.Op) bool { return isSync(op) && isWALOp(op) }}
	s, err := Open(Options{FS: errorfs.Wrap(mem, fault), Dir: "journal"})
	require.NoError(t, err)

	require.NoError(t, s.Append(hardState(1, 1, 3), ents(1, 5, 1), nil, true))
	require.NoError(t, s.Halted())

	fault.armed.Store(true)
	err = s.Append(hardState(1, 1, 5), ents(6, 8, 1), nil, true)
	require.ErrorIs(t, err, ErrHalted)
	require.ErrorIs(t, err, errorfs.ErrInjected)
	var ioErr *IOError
	require.ErrorAs(t, err, &ioErr)
	require.Equal(t, "sync", ioErr.Op)
	require.True(t, strings.HasPrefix(ioErr.Path, "journal/") && strings.HasSuffix(ioErr.Path, ".log"), "path %q", ioErr.Path)
	require.ErrorIs(t, s.Halted(), ErrHalted)

	// The disk works again: the store still refuses, and writes nothing.
	fault.armed.Store(false)
	require.ErrorIs(t, s.Append(hardState(1, 1, 5), ents(6, 8, 1), nil, true), ErrHalted)
	require.ErrorIs(t, s.SaveMembership(5, []byte("m")), ErrHalted)
	require.ErrorIs(t, s.Compact(2), ErrHalted)

	// Reads serve the acknowledged view, not the failed append.
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(5), last)
	got, err := s.Entries(1, 6, 1<<30)
	require.NoError(t, err)
	requireEntries(t, ents(1, 5, 1), got)
	require.Equal(t, uint64(3), s.HardState().GetCommit())

	_ = s.Close() // may report the failure again; it must return

	// The restart recovers from what is durable.
	s2 := openMem(t, mem, 0)
	require.NoError(t, s2.Halted())
	got, err = s2.Entries(1, 6, 1<<30)
	require.NoError(t, err)
	requireEntries(t, ents(1, 5, 1), got)
	require.GreaterOrEqual(t, s2.HardState().GetCommit(), uint64(3))
	require.NoError(t, s2.Append(hardState(1, 1, 5), ents(6, 8, 1), nil, true))
}

// TestFailedBackgroundWriteHaltsTheStore: a write Pebble makes in the
// background (here a flush's sstable) halts the store too, though no
// Append saw it fail.
func TestFailedBackgroundWriteHaltsTheStore(t *testing.T) {
	mem := vfs.NewMem()
	fault := &faultAfterArm{match: func(op errorfs.Op) bool {
		return strings.HasSuffix(op.Path, ".sst") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpCreate || isSync(op))
	}}
	s, err := Open(Options{FS: errorfs.Wrap(mem, fault), Dir: "journal"})
	require.NoError(t, err)
	require.NoError(t, s.Append(hardState(1, 1, 3), ents(1, 5, 1), nil, true))

	fault.armed.Store(true)
	_, err = s.db.AsyncFlush() // fails; Pebble retries it in the background
	require.NoError(t, err)
	select {
	case <-s.HaltedCh():
	case <-t.Context().Done():
		t.Fatal("the failed flush did not halt the store")
	}
	fault.armed.Store(false)
	err = s.Halted()
	require.ErrorIs(t, err, ErrHalted)
	require.ErrorIs(t, err, errorfs.ErrInjected)
	require.ErrorIs(t, s.Append(hardState(1, 1, 5), ents(6, 6, 1), nil, true), ErrHalted)
	_ = s.Close()

	s2 := openMem(t, mem, 0)
	got, err := s2.Entries(1, 6, 1<<30)
	require.NoError(t, err)
	requireEntries(t, ents(1, 5, 1), got)
}

// TestPebbleFatalHalts: Pebble's Fatalf halts the store instead of
// panicking or exiting the host, and keeps the cause for errors.Is.
func TestPebbleFatalHalts(t *testing.T) {
	h := newHalt()
	cause := errors.New("disk on fire")
	require.NotPanics(t, func() {
		pebbleLogger{l: discard, h: h}.Fatalf("pebble: fatal commit error: %v", cause)
	})
	require.ErrorIs(t, h.check(), ErrHalted)
	require.ErrorIs(t, h.check(), cause)
	require.Contains(t, h.check().Error(), "fatal commit error: disk on fire")
}

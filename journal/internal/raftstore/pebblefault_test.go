package raftstore

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// bigEntry is entry index with more data than half a memtable: Pebble
// commits it as a flushable batch, which rotates the WAL on the caller's
// goroutine, inside the commit.
func bigEntry(index uint64) *raftpb.Entry {
	return ent(index, 1, strings.Repeat("x", 17<<20))
}

func opIs(kinds ...errorfs.OpKind) func(errorfs.Op) bool {
	return func(op errorfs.Op) bool {
		for _, k := range kinds {
			if op.Kind == k {
				return true
			}
		}
		return false
	}
}

var writeOrSync = opIs(errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)

// walFiles lists the WAL files in the store's dir.
func walFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List("journal")
	require.NoError(t, err)
	var wals []string
	for _, n := range names {
		if isWAL(n) {
			wals = append(wals, n)
		}
	}
	slices.Sort(wals)
	return wals
}

// TestPebbleFailuresHaltTheStore injects an I/O error into each place
// where Pebble writes: creating, closing or syncing a WAL at rotation
// (where Pebble panics, on the committing goroutine), the directory fsync
// after a new WAL, a flush's sstable, the MANIFEST.
// Each halts the store with the operation and the file named, and nothing
// panics. The write that met the failure (if any) is refused, later writes
// too, reads of what was acknowledged go on, a WAL Pebble creates after
// the halt never reaches the disk, Close returns, and the data dir, as a
// power cut right then would leave it, opens with everything acknowledged
// and takes writes.
func TestPebbleFailuresHaltTheStore(t *testing.T) {
	rotate := func(t *testing.T, s *Store) error {
		return s.Append(hardState(1, 1, 5), []*raftpb.Entry{bigEntry(6)}, nil, true)
	}
	flush := func(t *testing.T, s *Store) error {
		_, err := s.db.AsyncFlush()
		return err
	}
	for _, tc := range []struct {
		name    string
		match   func(errorfs.Op) bool
		trigger func(*testing.T, *Store) error
		// refused: the trigger's own write fails (the failure is on its
		// path); otherwise the failure is in the background.
		refused bool
		op      string
		path    string // a substring of the failed file's path
	}{
		{"WAL create at rotation", func(op errorfs.Op) bool {
			return isWALOp(op) && opIs(errorfs.OpCreate, errorfs.OpReuseForWrite)(op)
		}, rotate, true, "create", ".log"},
		{"WAL close at rotation", func(op errorfs.Op) bool { return isWALOp(op) && isSync(op) }, rotate, true, "sync", ".log"},
		{"WAL write at rotation", func(op errorfs.Op) bool { return isWALOp(op) && op.Kind == errorfs.OpFileWrite }, rotate, true, "write", ".log"},
		{"directory fsync after a new WAL", func(op errorfs.Op) bool { return op.Path == "journal" && isSync(op) }, rotate, true, "sync", "journal"},
		{"flush sstable", func(op errorfs.Op) bool { return strings.HasSuffix(op.Path, ".sst") && writeOrSync(op) }, flush, false, "", ".sst"},
		{"MANIFEST", func(op errorfs.Op) bool { return strings.Contains(op.Path, "MANIFEST-") && writeOrSync(op) }, flush, false, "", "MANIFEST-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fault := &faultAfterArm{match: tc.match}
			s, err := Open(Options{FS: errorfs.Wrap(mem, fault), Dir: "journal"})
			require.NoError(t, err)
			// No flush before the fault: it would let Pebble recycle a WAL
			// file through ReuseForWrite, whose file errorfs does not wrap.
			require.NoError(t, s.Append(hardState(1, 1, 5), ents(1, 5, 1), nil, true))

			fault.armed.Store(true)
			err = tc.trigger(t, s)
			if tc.refused {
				require.ErrorIs(t, err, ErrHalted)
			}
			select {
			case <-s.HaltedCh():
			case <-t.Context().Done():
				t.Fatal("the failure did not halt the store")
			}
			fault.armed.Store(false)

			requireHaltedAndRecovers(t, s, mem, 5, tc.op, tc.path)
		})
	}
}

// TestFailedOptionsWriteFailsOpen: Pebble writes its OPTIONS file only
// while it opens (to a temporary file it renames); a failure there fails
// Open with the cause (no panic), and the dir opens once the disk works.
func TestFailedOptionsWriteFailsOpen(t *testing.T) {
	mem := vfs.NewMem()
	fault := &faultAfterArm{match: func(op errorfs.Op) bool {
		return strings.HasSuffix(op.Path, ".dbtmp") && opIs(errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpRename)(op)
	}}
	fault.armed.Store(true)
	_, err := Open(Options{FS: errorfs.Wrap(mem, fault), Dir: "journal"})
	require.ErrorIs(t, err, errorfs.ErrInjected)
	require.Contains(t, err.Error(), ".dbtmp")

	fault.armed.Store(false)
	s := openMem(t, mem, 0)
	require.NoError(t, s.Append(hardState(1, 1, 2), ents(1, 2, 1), nil, true))
}

// requireHaltedAndRecovers checks a store that halted on a failed op on
// the file whose path contains path, with entries 1..acked acknowledged: the
// halt names the operation and the file, writes are refused, reads go on,
// a WAL Pebble creates now stays off the disk, Close returns, and the dir
// opens (as left, and as a power cut now would leave it) with every
// acknowledged entry, and takes writes.
func requireHaltedAndRecovers(t *testing.T, s *Store, mem *vfs.MemFS, acked uint64, op, path string) {
	t.Helper()
	err := s.Halted()
	require.ErrorIs(t, err, ErrHalted)
	require.ErrorIs(t, err, errorfs.ErrInjected)
	var ioErr *IOError
	require.ErrorAs(t, err, &ioErr)
	if op != "" {
		require.Equal(t, op, ioErr.Op)
	}
	require.Contains(t, ioErr.Path, path)
	require.Contains(t, err.Error(), ioErr.Path, "the error names the file")

	require.ErrorIs(t, s.Append(hardState(1, 1, acked), ents(acked+1, acked+2, 1), nil, true), ErrHalted)
	got, err := s.Entries(1, acked+1, math.MaxUint64)
	require.NoError(t, err)
	requireEntries(t, ents(1, acked, 1), got)

	// A WAL rotation after the halt creates no file on disk.
	wals := walFiles(t, mem)
	_, err = s.db.AsyncFlush()
	require.NoError(t, err)
	require.Equal(t, wals, walFiles(t, mem), "a WAL created after the halt stays off the disk")

	_ = s.Close() // may report the failure again; it must return
	require.NoError(t, s.Close())

	for _, dir := range []*vfs.MemFS{mem.CrashClone(vfs.CrashCloneCfg{}), mem} {
		s2, err := Open(Options{FS: dir, Dir: "journal"})
		require.NoError(t, err, "the data dir opens after the failure")
		require.NoError(t, s2.Halted())
		got, err := s2.Entries(1, acked+1, math.MaxUint64)
		require.NoError(t, err)
		requireEntries(t, ents(1, acked, 1), got)
		require.GreaterOrEqual(t, s2.HardState().GetCommit(), acked)
		require.NoError(t, s2.Append(hardState(1, 1, acked), ents(acked+1, acked+2, 1), nil, true))
		require.NoError(t, s2.Close())
	}
}

// compactionFault fails the creation of a compaction's output once armed
// (errorfs cannot tell a compaction's sstable from a flush's).
type compactionFault struct {
	vfs.FS
	armed *atomic.Bool
}

func (f compactionFault) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.armed.Load() && c == "pebble-compaction" {
		return nil, errorfs.ErrInjected
	}
	return f.FS.Create(name, c)
}

// TestFailedCompactionHaltsTheStore: a compaction whose output cannot be
// created halts the store like any other failed write. Two flushes leave
// two overlapping L0 sstables (both hold the hard state), and a manual
// compaction of the whole key space must write their merge, so the test
// does not depend on when Pebble compacts by itself; a background
// compaction that fails first halts the store just the same.
func TestFailedCompactionHaltsTheStore(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var armed atomic.Bool
	armed.Store(true)
	s, err := Open(Options{FS: compactionFault{FS: mem, armed: &armed}, Dir: "journal"})
	require.NoError(t, err)
	var acked uint64
	flush := func() bool {
		// Not Flush: once halted, a flush waits for Close (haltFS parks it).
		flushed, err := s.db.AsyncFlush()
		require.NoError(t, err)
		select {
		case <-flushed:
			return s.Halted() != nil
		case <-s.HaltedCh():
			return true
		}
	}
	halted := false
	for range 2 {
		err := s.Append(hardState(1, 1, acked+1), ents(acked+1, acked+1, 1), nil, true)
		if errors.Is(err, ErrHalted) {
			halted = true // a background compaction failed meanwhile
			break
		}
		require.NoError(t, err)
		acked++
		if halted = flush(); halted {
			break
		}
	}
	if !halted {
		// Pebble retries a failed compaction rather than report it to a
		// manual Compact, so the halt is awaited and the call cancelled.
		ctx, cancel := context.WithCancel(t.Context())
		compacted := make(chan error, 1)
		go func() { compacted <- s.db.Compact(ctx, []byte{0}, bytes.Repeat([]byte{0xff}, 64), false) }()
		select {
		case <-s.HaltedCh():
		case err := <-compacted:
			t.Fatalf("the compaction returned %v without halting the store", err)
		}
		cancel()
		<-compacted
	}
	armed.Store(false)
	requireHaltedAndRecovers(t, s, mem, acked, "create", ".sst")
}

// TestFailedReadHaltsTheStore: a read of the log that fails on the disk
// (an sstable block) fails with the cause and halts the store: raft cannot
// take the error (it panics on it), and the halt tells the journal why.
func TestFailedReadHaltsTheStore(t *testing.T) {
	mem := vfs.NewMem()
	fault := &faultAfterArm{match: func(op errorfs.Op) bool {
		return strings.HasSuffix(op.Path, ".sst") && opIs(errorfs.OpFileRead, errorfs.OpFileReadAt)(op)
	}}
	s, err := Open(Options{FS: errorfs.Wrap(mem, fault), Dir: "journal", CacheBytes: -1})
	require.NoError(t, err)
	require.NoError(t, s.Append(hardState(1, 1, 5), ents(1, 5, 1), nil, true))
	require.NoError(t, s.db.Flush())

	fault.armed.Store(true)
	_, err = s.Entries(1, 6, math.MaxUint64)
	require.ErrorIs(t, err, errorfs.ErrInjected)
	require.ErrorIs(t, s.Halted(), ErrHalted)
	require.ErrorIs(t, s.Halted(), errorfs.ErrInjected)
	require.ErrorContains(t, s.Halted(), "read journal")
	fault.armed.Store(false)
	require.ErrorIs(t, s.Append(hardState(1, 1, 5), ents(6, 6, 1), nil, true), ErrHalted)
	require.NoError(t, s.Close())

	s2 := openMem(t, mem, -1)
	got, err := s2.Entries(1, 6, math.MaxUint64)
	require.NoError(t, err)
	requireEntries(t, ents(1, 5, 1), got)
}

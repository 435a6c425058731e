package raftstore

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// crash returns a copy of fs as a power cut would leave it (only synced
// data, plus a random share of unsynced data when rng is set), and closes s.
func crash(t *testing.T, fs *vfs.MemFS, s *Store, rng *rand.Rand) *vfs.MemFS {
	t.Helper()
	cfg := vfs.CrashCloneCfg{}
	if rng != nil {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}
	}
	clone := fs.CrashClone(cfg)
	require.NoError(t, s.Close())
	return clone
}

func TestCrashUnsyncedAppendLostSyncedKept(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{FS: fs, Dir: "/data/node/journal"}) // new dirs must survive the crash
	require.NoError(t, err)
	require.NoError(t, s.Append(hardState(1, 1, 5), ents(1, 5, 1), nil, true))
	// Commit-only HardState change plus entries written without a sync: the
	// shape the crash may take away.
	require.NoError(t, s.Append(hardState(1, 1, 5), ents(6, 8, 1), nil, false))

	after := crash(t, fs, s, nil)
	s, err = Open(Options{FS: after, Dir: "/data/node/journal"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(5), last, "the unsynced append is lost")
	got, err := s.Entries(1, 6, math.MaxUint64)
	require.NoError(t, err)
	requireEntries(t, ents(1, 5, 1), got)
	hs, _, err := s.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(hardState(1, 1, 5), hs))

	// A later synced commit makes an earlier unsynced one durable too (one WAL).
	require.NoError(t, s.Append(nil, ents(6, 6, 1), nil, false))
	require.NoError(t, s.Append(hardState(1, 1, 7), ents(7, 7, 1), nil, true))
	s2, err := Open(Options{FS: crash(t, after, s, nil), Dir: "/data/node/journal"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	last, err = s2.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(7), last)
}

// TestCrashRandom appends, overwrites, snapshots and compacts at random,
// cuts the power at random points keeping a random share of unsynced
// writes, and checks that every reopened store passes Open's invariants
// (never a HardState ahead of its entries), keeps everything that was
// synced, and holds exactly what was written at each retained index.
func TestCrashRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		fs := vfs.NewCrashableMem()
		s := openMem(t, fs, int64(rng.IntN(4096)))
		// model: what was written at each index (latest write wins), and the
		// durable floor: last index and commit at the latest synced commit.
		written := map[uint64]*raftpb.Entry{}
		// allowed: what a crash may leave at each index: the version as of
		// the last synced commit, or any written since.
		allowed := map[uint64][]*raftpb.Entry{}
		synced := func() {
			for i, e := range written {
				allowed[i] = []*raftpb.Entry{e}
			}
		}
		var last, commit, term, syncedLast, syncedCommit uint64
		term = 1
		for op := range 30 {
			switch r := rng.IntN(10); {
			case r < 6 || last == 0: // append, sometimes overwriting a suffix
				from := last + 1
				if last > commit && rng.IntN(3) == 0 {
					from = commit + 1 + uint64(rng.IntN(int(last-commit)))
					term++
				}
				n := uint64(1 + rng.IntN(5))
				es := make([]*raftpb.Entry, 0, n)
				for i := from; i < from+n; i++ {
					es = append(es, ent(i, term, string(rune('a'+rng.IntN(26)))))
				}
				last = from + n - 1
				commit = min(last, commit+uint64(rng.IntN(4)))
				sync := rng.IntN(3) != 0
				require.NoError(t, s.Append(hardState(term, 1, commit), es, nil, sync), "round %d op %d", round, op)
				for _, e := range es {
					written[e.GetIndex()] = e
					allowed[e.GetIndex()] = append(allowed[e.GetIndex()], e)
				}
				if sync {
					syncedLast, syncedCommit = last, commit
					synced()
				}
			case r < 8: // image at the commit index, then compaction
				snap, _ := s.Snapshot()
				if commit == 0 || commit <= snap.GetMetadata().GetIndex() || s.HardState().GetCommit() < commit {
					continue // nothing new, or the commit is not durable yet (SetSnapshot refuses)
				}
				require.NoError(t, s.SetSnapshot(snapshot(commit, written[commit].GetTerm(), 1)))
				if first, _ := s.FirstIndex(); rng.IntN(2) == 0 && first <= commit {
					require.NoError(t, s.Compact(first+uint64(rng.IntN(int(commit-first+1)))))
				}
				syncedLast, syncedCommit = last, commit // SetSnapshot synced the WAL
				synced()
			default: // commit-only HardState, unsynced (MustSync false)
				commit = last
				require.NoError(t, s.Append(hardState(term, 1, commit), nil, nil, false))
			}
		}
		after := crash(t, fs, s, rng)
		s = openMem(t, after, 0) // Open checks trunc <= snap <= commit <= last
		gotLast, err := s.LastIndex()
		require.NoError(t, err)
		hs, _, err := s.InitialState()
		require.NoError(t, err)
		require.GreaterOrEqual(t, gotLast, syncedLast, "round %d: synced entries lost", round)
		require.GreaterOrEqual(t, hs.GetCommit(), syncedCommit, "round %d: synced commit lost", round)
		require.LessOrEqual(t, hs.GetCommit(), gotLast, "round %d: HardState ahead of entries", round)
		first, err := s.FirstIndex()
		require.NoError(t, err)
		got, err := s.Entries(first, gotLast+1, math.MaxUint64)
		require.NoError(t, err)
		for _, e := range got {
			ok := false
			for _, a := range allowed[e.GetIndex()] {
				ok = ok || proto.Equal(a, e)
			}
			require.True(t, ok, "round %d: entry %d: %v is none of %v", round, e.GetIndex(), e, allowed[e.GetIndex()])
		}
		require.NoError(t, s.Close())
	}
}

// writeRaw opens the store's Pebble directly to plant a broken state.
var discard = slog.New(slog.DiscardHandler)

func writeRaw(t *testing.T, fs vfs.FS, kvs map[string][]byte, dels ...[2][]byte) {
	t.Helper()
	db, err := pebble.Open("journal", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest, Logger: pebbleLogger{l: discard, h: newHalt()}})
	require.NoError(t, err)
	for k, v := range kvs {
		require.NoError(t, db.Set([]byte(k), v, pebble.Sync))
	}
	for _, d := range dels {
		require.NoError(t, db.DeleteRange(d[0], d[1], pebble.Sync))
	}
	require.NoError(t, db.Close())
}

func TestOpenRefusesBrokenInvariants(t *testing.T) {
	mustMarshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		kvs  map[string][]byte
		dels [][2][]byte
		msg  string
	}{
		{"commit past last", map[string][]byte{"m/hs": mustMarshal(hardState(1, 1, 11))}, nil, "HardState ahead of entries"},
		{"snapshot past commit", map[string][]byte{"m/snap": mustMarshal(snapshot(8, 1))}, nil, "past the durable commit"},
		{"trunc past snapshot", map[string][]byte{"m/trunc": encodeTrunc(truncState{3, 1})}, [][2][]byte{{entryKey(1), entryKey(4)}}, "past the snapshot index"},
		{"log not after trunc", nil, [][2][]byte{{entryKey(1), entryKey(3)}}, "log starts at 3"},
		{"unknown format", map[string][]byte{"m/fmt": {9}}, nil, "unknown format version"},
		{"garbage hard state", map[string][]byte{"m/hs": {0xff, 0xff, 0xff}}, nil, "m/hs"},
		{"short trunc", map[string][]byte{"m/trunc": {1, 2}}, nil, "m/trunc"},
		{"foreign key in log", map[string][]byte{"l/xx": {1}}, nil, "not l/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openMem(t, fs, 0)
			require.NoError(t, s.Append(hardState(1, 1, 5), ents(1, 10, 1), nil, true))
			require.NoError(t, s.Close())
			writeRaw(t, fs, tt.kvs, tt.dels...)
			_, err := Open(Options{FS: fs, Dir: "journal"})
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, tt.msg)
		})
	}

	t.Run("not a raftstore", func(t *testing.T) {
		fs := vfs.NewMem()
		writeRaw(t, fs, map[string][]byte{"other": {1}})
		_, err := Open(Options{FS: fs, Dir: "journal"})
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("corrupt entry", func(t *testing.T) {
		fs := vfs.NewMem()
		s := openMem(t, fs, -1)
		require.NoError(t, s.Append(hardState(1, 1, 5), ents(1, 10, 1), nil, true))
		require.NoError(t, s.Close())
		writeRaw(t, fs, map[string][]byte{string(entryKey(4)): {7, 0}})
		s = openMem(t, fs, -1)
		_, err := s.Entries(1, 11, math.MaxUint64)
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, "entry 4")
		_, err = s.Term(4)
		require.ErrorIs(t, err, ErrCorrupt)
	})
}

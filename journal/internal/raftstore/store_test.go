package raftstore

import (
	"fmt"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

// TestMain checks for leaked goroutines. One is Pebble's, not ours: a
// pebble.Open that fails after registering its compaction scheduler
// (open.go, writing the OPTIONS file) returns without unregistering it, so
// the scheduler's periodicGranter runs on (TestFailedOptionsWriteFailsOpen).
// A DB left open still shows, by its other goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2.(*ConcurrencyLimitScheduler).periodicGranter"))
}

func ent(index, term uint64, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: new(index), Term: new(term), Type: new(raftpb.EntryNormal), Data: []byte(data)}
}

func ents(lo, hi, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, ent(i, term, fmt.Sprintf("e%d-t%d", i, term)))
	}
	return out
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func snapshot(index, term uint64, voters ...uint64) *raftpb.Snapshot {
	return &raftpb.Snapshot{
		Data: []byte(fmt.Sprintf("image.%d", index)),
		Metadata: &raftpb.SnapshotMetadata{
			Index: new(index), Term: new(term),
			ConfState: &raftpb.ConfState{Voters: voters},
		},
	}
}

func openMem(t *testing.T, fs vfs.FS, cacheBytes int64) *Store {
	t.Helper()
	s, err := Open(Options{FS: fs, Dir: "journal", CacheBytes: cacheBytes})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func requireEntries(t *testing.T, want, got []*raftpb.Entry) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Truef(t, proto.Equal(want[i], got[i]), "entry %d: want %v, got %v", i, want[i], got[i])
	}
}

// cacheModes runs a test with the entry cache holding everything, nothing,
// and part of the log (so reads straddle Pebble and the cache).
var cacheModes = []struct {
	name  string
	bytes int64
}{
	{"cache=all", 1 << 20},
	{"cache=off", -1},
	{"cache=part", 2 * entryBytes(ent(0, 0, "e4-t4"))},
}

// newContractStore builds the log of etcd's storage_test.go: truncated at
// (3, 3), entries 4, 5, 6 with terms 4, 5, 6.
func newContractStore(t *testing.T, cacheBytes int64) (*Store, []*raftpb.Entry) {
	s := openMem(t, vfs.NewMem(), cacheBytes)
	log := []*raftpb.Entry{ent(4, 4, "four"), ent(5, 5, "five"), ent(6, 6, "six")}
	require.NoError(t, s.Append(hardState(6, 1, 6), log, snapshot(3, 3, 1, 2, 3), true))
	return s, log
}

func TestStorageTerm(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			s, _ := newContractStore(t, mode.bytes)
			tests := []struct {
				i    uint64
				want uint64
				err  error
			}{
				{2, 0, raft.ErrCompacted},
				{3, 3, nil}, // FirstIndex()-1 answers from the truncation record
				{4, 4, nil},
				{5, 5, nil},
				{6, 6, nil},
				{7, 0, raft.ErrUnavailable},
			}
			for _, tt := range tests {
				got, err := s.Term(tt.i)
				require.Equal(t, tt.err, err, "Term(%d)", tt.i) // bare sentinels: raft uses ==
				require.Equal(t, tt.want, got, "Term(%d)", tt.i)
			}
			first, err := s.FirstIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(4), first)
			last, err := s.LastIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(6), last)
		})
	}
}

func TestStorageEntries(t *testing.T) {
	size := func(es ...*raftpb.Entry) uint64 {
		var n uint64
		for _, e := range es {
			n += uint64(proto.Size(e))
		}
		return n
	}
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			s, log := newContractStore(t, mode.bytes)
			e4, e5, e6 := log[0], log[1], log[2]
			tests := []struct {
				name        string
				lo, hi, max uint64
				err         error
				want        []*raftpb.Entry
			}{
				{"below truncation", 2, 6, math.MaxUint64, raft.ErrCompacted, nil},
				{"at truncation", 3, 4, math.MaxUint64, raft.ErrCompacted, nil},
				{"one", 4, 5, math.MaxUint64, nil, []*raftpb.Entry{e4}},
				{"two", 4, 6, math.MaxUint64, nil, []*raftpb.Entry{e4, e5}},
				{"all", 4, 7, math.MaxUint64, nil, []*raftpb.Entry{e4, e5, e6}},
				{"tail", 6, 7, math.MaxUint64, nil, []*raftpb.Entry{e6}},
				{"past last", 4, 8, math.MaxUint64, raft.ErrUnavailable, nil},
				{"max 0 still gives one", 4, 7, 0, nil, []*raftpb.Entry{e4}},
				{"max below first gives one", 4, 7, size(e4) - 1, nil, []*raftpb.Entry{e4}},
				{"max exactly two", 4, 7, size(e4, e5), nil, []*raftpb.Entry{e4, e5}},
				{"max between two and three", 4, 7, size(e4, e5) + size(e6)/2, nil, []*raftpb.Entry{e4, e5}},
				{"max exactly three", 4, 7, size(e4, e5, e6), nil, []*raftpb.Entry{e4, e5, e6}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					got, err := s.Entries(tt.lo, tt.hi, tt.max)
					require.Equal(t, tt.err, err)
					requireEntries(t, tt.want, got)
				})
			}
		})
	}
}

// The caller owns the returned slice and may append to it; that must not
// change what the store returns next.
func TestStorageEntriesFreshSlice(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			s, log := newContractStore(t, mode.bytes)
			got, err := s.Entries(4, 6, math.MaxUint64)
			require.NoError(t, err)
			got = append(got, ent(99, 99, "intruder"))
			got[0] = ent(98, 98, "overwritten")
			again, err := s.Entries(4, 7, math.MaxUint64)
			require.NoError(t, err)
			requireEntries(t, log, again)
		})
	}
}

func TestInitialStateAndSnapshot(t *testing.T) {
	s := openMem(t, vfs.NewMem(), 0)
	hs, cs, err := s.InitialState()
	require.NoError(t, err)
	require.True(t, raft.IsEmptyHardState(hs))
	require.NotNil(t, cs)
	_, err = s.Snapshot()
	require.Equal(t, raft.ErrSnapshotTemporarilyUnavailable, err, "no image yet")

	require.NoError(t, s.Append(hardState(2, 1, 5), ents(1, 5, 2), nil, true))
	require.NoError(t, s.SetSnapshot(snapshot(4, 2, 1, 2, 3)))
	hs, cs, err = s.InitialState()
	require.NoError(t, err)
	require.Truef(t, proto.Equal(hardState(2, 1, 5), hs), "%v", hs)
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
	snap, err := s.Snapshot()
	require.NoError(t, err)
	require.Truef(t, proto.Equal(raftpb.EnsureSnapshot(snapshot(4, 2, 1, 2, 3)), snap), "%v", snap)
}

func TestAppendTruncatesConflictingSuffix(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openMem(t, fs, mode.bytes)
			require.NoError(t, s.Append(hardState(1, 1, 2), ents(1, 5, 1), nil, true))

			// A new leader overwrites 3..5 with a shorter 3..4 at term 2.
			require.NoError(t, s.Append(hardState(2, 2, 2), ents(3, 4, 2), nil, true))
			want := append(ents(1, 2, 1), ents(3, 4, 2)...)
			check := func(s *Store) {
				t.Helper()
				last, err := s.LastIndex()
				require.NoError(t, err)
				require.Equal(t, uint64(4), last)
				got, err := s.Entries(1, 5, math.MaxUint64)
				require.NoError(t, err)
				requireEntries(t, want, got)
				_, err = s.Term(5)
				require.Equal(t, raft.ErrUnavailable, err)
				_, err = s.Entries(1, 6, math.MaxUint64)
				require.Equal(t, raft.ErrUnavailable, err)
			}
			check(s)
			require.NoError(t, s.Close())
			s = openMem(t, fs, mode.bytes)
			check(s) // the suffix is gone on disk too, not just in the view

			// A longer overwrite from the middle.
			require.NoError(t, s.Append(nil, ents(2, 7, 3), nil, true))
			got, err := s.Entries(1, 8, math.MaxUint64)
			require.NoError(t, err)
			requireEntries(t, append(ents(1, 1, 1), ents(2, 7, 3)...), got)
		})
	}
}

func TestAppendSnapshotReplacesLog(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, 0)
	require.NoError(t, s.Append(hardState(1, 1, 3), ents(1, 8, 1), nil, true))
	// A snapshot from a new leader at 20: the whole old log goes.
	require.NoError(t, s.Append(hardState(3, 0, 20), ents(21, 22, 3), snapshot(20, 3, 1, 2, 3), false))
	check := func(s *Store) {
		t.Helper()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		require.Equal(t, uint64(21), first)
		require.Equal(t, uint64(22), last)
		term, err := s.Term(20)
		require.NoError(t, err)
		require.Equal(t, uint64(3), term)
		_, err = s.Entries(8, 9, math.MaxUint64)
		require.Equal(t, raft.ErrCompacted, err)
		got, err := s.Entries(21, 23, math.MaxUint64)
		require.NoError(t, err)
		requireEntries(t, ents(21, 22, 3), got)
	}
	check(s)
	syncs := s.Syncs()
	require.NoError(t, s.Close())
	require.Equal(t, uint64(3), syncs, "fmt + two appends; a snapshot forces a sync")
	s = openMem(t, fs, 0)
	check(s)

	err := s.Append(nil, nil, snapshot(10, 3), true)
	require.ErrorContains(t, err, "not newer")
	err = s.Append(nil, nil, snapshot(30, 3), true)
	require.ErrorContains(t, err, "behind the snapshot", "a snapshot past the durable commit would break restart")
	err = s.Append(hardState(3, 0, 29), nil, snapshot(30, 3), true)
	require.ErrorContains(t, err, "behind the snapshot")
}

func TestAppendRejects(t *testing.T) {
	s := openMem(t, vfs.NewMem(), 0)
	require.NoError(t, s.Append(hardState(1, 1, 1), ents(1, 3, 1), nil, true))
	tests := []struct {
		name string
		hs   *raftpb.HardState
		ents []*raftpb.Entry
		msg  string
	}{
		{"gap", nil, ents(5, 6, 1), "gap"},
		{"not contiguous", nil, []*raftpb.Entry{ent(4, 1, "a"), ent(6, 1, "b")}, "not contiguous"},
		{"commit past last", hardState(1, 1, 9), ents(4, 4, 1), "past the last entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, s.Append(tt.hs, tt.ents, nil, true), tt.msg)
			last, err := s.LastIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(3), last, "nothing written")
			hs, _, _ := s.InitialState()
			require.Equal(t, uint64(1), hs.GetCommit())
		})
	}
}

func TestSetSnapshotAndCompact(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, 0)
	require.NoError(t, s.Append(hardState(2, 1, 6), append(ents(1, 4, 1), ents(5, 10, 2)...), nil, true))

	require.ErrorContains(t, s.SetSnapshot(snapshot(7, 2)), "past the durable commit")
	require.ErrorContains(t, s.SetSnapshot(snapshot(5, 1)), "the log has term 2")
	require.ErrorContains(t, s.Compact(3), "past the snapshot index")

	require.NoError(t, s.SetSnapshot(snapshot(5, 2, 1, 2, 3)))
	require.NoError(t, s.SetSnapshot(snapshot(5, 2, 1, 2, 3)), "idempotent")
	require.ErrorIs(t, s.SetSnapshot(snapshot(4, 1)), raft.ErrSnapOutOfDate)

	require.NoError(t, s.SaveMembership(1, []byte("m1")))
	require.NoError(t, s.SaveMembership(3, []byte("m3")))
	require.NoError(t, s.SaveMembership(8, []byte("m8")))

	require.NoError(t, s.Compact(4))
	require.Equal(t, raft.ErrCompacted, s.Compact(4))
	require.ErrorContains(t, s.Compact(6), "past the snapshot index")

	check := func(s *Store) {
		t.Helper()
		first, _ := s.FirstIndex()
		require.Equal(t, uint64(5), first)
		term, err := s.Term(4)
		require.NoError(t, err)
		require.Equal(t, uint64(1), term, "term of FirstIndex()-1 kept")
		_, err = s.Term(3)
		require.Equal(t, raft.ErrCompacted, err)
		_, err = s.Entries(4, 5, math.MaxUint64)
		require.Equal(t, raft.ErrCompacted, err)
		got, err := s.Entries(5, 11, math.MaxUint64)
		require.NoError(t, err)
		requireEntries(t, ents(5, 10, 2), got)

		for _, tt := range []struct {
			index uint64
			want  string
		}{{4, "m3"}, {5, "m3"}, {7, "m3"}, {8, "m8"}, {100, "m8"}, {math.MaxUint64, "m8"}} {
			blob, err := s.MembershipAt(tt.index)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(blob), "MembershipAt(%d)", tt.index)
		}
		_, err = s.MembershipAt(2)
		require.ErrorIs(t, err, ErrNoMembership, "m1 pruned by the compaction, m3 is newer")
	}
	check(s)
	require.NoError(t, s.Close())
	s = openMem(t, fs, 0)
	check(s)
	snap, err := s.Snapshot()
	require.NoError(t, err)
	require.Equal(t, uint64(5), snap.GetMetadata().GetIndex())

	// Compact everything the snapshot covers after more commits.
	require.NoError(t, s.Append(hardState(2, 1, 10), nil, nil, true))
	require.NoError(t, s.SetSnapshot(snapshot(10, 2, 1, 2, 3)))
	require.NoError(t, s.Compact(10))
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	require.Equal(t, uint64(11), first)
	require.Equal(t, uint64(10), last, "empty log: LastIndex = FirstIndex-1")
	require.NoError(t, s.Append(hardState(3, 1, 11), ents(11, 11, 3), nil, true))
	got, err := s.Entries(11, 12, math.MaxUint64)
	require.NoError(t, err)
	requireEntries(t, ents(11, 11, 3), got)
}

func TestClosed(t *testing.T) {
	s := openMem(t, vfs.NewMem(), 0)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "idempotent")
	_, err := s.Entries(1, 2, 0)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Term(0)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Append(nil, ents(1, 1, 1), nil, true), ErrClosed)
	_, _, err = s.InitialState()
	require.ErrorIs(t, err, ErrClosed)
}

func TestSyncs(t *testing.T) {
	s := openMem(t, vfs.NewMem(), 0)
	base := s.Syncs()
	require.NoError(t, s.Append(hardState(1, 1, 0), ents(1, 2, 1), nil, true))
	require.Equal(t, base+1, s.Syncs())
	require.NoError(t, s.Append(hardState(1, 1, 2), nil, nil, false))
	require.Equal(t, base+1, s.Syncs(), "a commit-only HardState needs no fsync")
}

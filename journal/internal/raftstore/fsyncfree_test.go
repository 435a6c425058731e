package raftstore

import (
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
)

// A synced append that overwrites an uncommitted tail holds no lock
// raft's reads take across its fsync: during the fsync the view ends
// before the overwritten tail (Pebble no longer has it, and its
// replacement is not durable), reads below it answer from the cache or
// the disk, and the replacement is visible once the Append returns. The
// held fsync can begin before the Append releases the lock it applies its
// batch under, so the reads block on it briefly; were they to wait for the
// fsync, the test would hang until the binary's -timeout.
func TestTailOverwriteFsyncLeavesReadsFree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int64
	}{{"cached", 0}, {"uncached", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &heldSyncFS{FS: vfs.NewMem(), started: make(chan struct{}), release: make(chan struct{})}
			s := openMem(t, fs, tc.cache)
			require.NoError(t, s.Append(hardState(1, 1, 3), ents(1, 10, 1), nil, true))

			fs.on.Store(true)
			done := make(chan error, 1)
			go func() { done <- s.Append(hardState(2, 2, 3), ents(6, 7, 2), nil, true) }()
			<-fs.started
			last, err := s.LastIndex()
			require.NoError(t, err)
			got, err := s.Entries(1, 6, math.MaxUint64)
			require.NoError(t, err)
			_, termErr := s.Term(6)
			hs := s.HardState()
			close(fs.release)
			require.NoError(t, <-done)

			require.Equal(t, uint64(5), last, "the view ends before the tail the fsync replaces")
			requireEntries(t, ents(1, 5, 1), got)
			require.ErrorIs(t, termErr, raft.ErrUnavailable)
			require.Equal(t, uint64(1), hs.GetTerm(), "the HardState is published after its fsync")

			last, err = s.LastIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(7), last)
			got, err = s.Entries(1, 8, math.MaxUint64)
			require.NoError(t, err)
			requireEntries(t, append(ents(1, 5, 1), ents(6, 7, 2)...), got)
			require.Equal(t, uint64(2), s.HardState().GetTerm())
		})
	}
}

// SaveMembership (the applier's) does not wait for an Append's fsync:
// with the fsync held, the save returns and reads back. Were it to wait,
// the test would hang until the binary's -timeout.
func TestMembershipSaveDoesNotWaitForAnAppendsFsync(t *testing.T) {
	fs := &heldSyncFS{FS: vfs.NewMem(), started: make(chan struct{}), release: make(chan struct{})}
	s := openMem(t, fs, 0)
	require.NoError(t, s.Append(hardState(1, 1, 5), ents(1, 5, 1), nil, true))

	fs.on.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.Append(hardState(1, 1, 5), ents(6, 8, 1), nil, true) }()
	<-fs.started
	saveErr := s.SaveMembership(5, []byte("members@5"))
	blob, readErr := s.MembershipAt(7)
	close(fs.release)
	require.NoError(t, <-done)
	require.NoError(t, saveErr)
	require.NoError(t, readErr)
	require.Equal(t, []byte("members@5"), blob)
}

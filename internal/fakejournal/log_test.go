package fakejournal_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/fakejournal"
)

// sum is a state machine that adds up the lengths of the entries it applied.
type sum struct{ n, index uint64 }

func (s *sum) Apply(index uint64, data []byte) any {
	s.n += uint64(len(data))
	s.index = index
	return s.n
}

// Every committed entry applies to every replica at the same index, and a
// proposal returns its own replica's result; one whose ctx ended commits
// all the same.
func TestCommitsApplyToEveryReplica(t *testing.T) {
	l := fakejournal.New()
	a, b := &sum{}, &sum{}
	l.Attach(1, a)
	l.Attach(2, b)
	index, v, err := l.Replica(2).Propose(t.Context(), []byte("abc"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), index)
	require.Equal(t, uint64(3), v)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err = l.Replica(1).Propose(ctx, []byte("de"))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, uint64(1), l.Index(), "a proposal cancelled before it starts commits nothing")

	_, results := l.Commit([]byte("fg"))
	require.Equal(t, map[uint64]any{1: uint64(5), 2: uint64(5)}, results)
	require.Equal(t, a.index, b.index)

	l.SetLease(1, 3, false)
	l.SetLease(2, 3, true)
	l.SetLeader(4, 1)
	term, leader := l.Replica(1).LeaderTerm()
	require.Equal(t, uint64(4), term)
	require.True(t, leader)
	_, leader = l.Replica(2).LeaderTerm()
	require.False(t, leader)
}

// ImageWritten compacts up to the newest image at least the margin behind
// the new one; entries compacted away are ErrCompacted.
func TestImageWrittenCompactsBehindTheMargin(t *testing.T) {
	l := fakejournal.New()
	l.SetMargin(10)
	for range 40 {
		l.Commit([]byte("x"))
	}
	require.NoError(t, l.ImageWritten(t.Context(), 15, 1, nil))
	require.Zero(t, l.Compacted(), "no earlier image to compact up to")
	require.NoError(t, l.ImageWritten(t.Context(), 30, 1, nil))
	require.Equal(t, uint64(15), l.Compacted())
	require.Equal(t, []uint64{15, 30}, l.Images())

	err := l.ReadEntries(t.Context(), 10, 20, func(uint64, []byte) error { return nil })
	require.ErrorIs(t, err, fakejournal.ErrCompacted)
	var got []uint64
	require.NoError(t, l.ReadEntries(t.Context(), 15, 18, func(i uint64, _ []byte) error { got = append(got, i); return nil }))
	require.Equal(t, []uint64{16, 17, 18}, got)
}

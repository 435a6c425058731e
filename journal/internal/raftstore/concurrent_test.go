package raftstore

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
)

// TestConcurrentReadsDuringWrites runs readers (as the image package and
// raft's own goroutine would) against appends, suffix overwrites and
// compactions; under -race this checks the locking, and every read must be
// either a raft sentinel or a consistent, contiguous answer.
func TestConcurrentReadsDuringWrites(t *testing.T) {
	s := openMem(t, vfs.NewMem(), 4096)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 3 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last < first {
					continue
				}
				lo := first + uint64(n*(r+1))%(last-first+1)
				got, err := s.Entries(lo, last+1, math.MaxUint64)
				if errors.Is(err, raft.ErrCompacted) || errors.Is(err, raft.ErrUnavailable) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				for i, e := range got {
					if e.GetIndex() != lo+uint64(i) {
						errs <- errors.New("entries not contiguous")
						return
					}
				}
				if _, err := s.Term(lo); err != nil && !errors.Is(err, raft.ErrCompacted) && !errors.Is(err, raft.ErrUnavailable) {
					errs <- err
					return
				}
			}
		})
	}
	var last, commit, term uint64 = 0, 0, 1
	for i := range 300 {
		from := last + 1
		if i%7 == 6 && last > commit+2 {
			from = last - 1 // overwrite a suffix, sometimes shorter
			term++
		}
		n := uint64(1 + i%3)
		last = from + n - 1
		commit = min(last, commit+2)
		require.NoError(t, s.Append(hardState(term, 1, commit), ents(from, last, term), nil, i%2 == 0))
		if i%25 == 24 {
			require.NoError(t, s.SetSnapshot(snapshot(commit, mustTerm(t, s, commit), 1)))
			require.NoError(t, s.Compact(commit-1))
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func mustTerm(t *testing.T, s *Store, i uint64) uint64 {
	t.Helper()
	term, err := s.Term(i)
	require.NoError(t, err)
	return term
}

package raftstore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// allocRecorder is a file that records the ranges it is asked to
// preallocate.
type allocRecorder struct {
	vfs.File
	ranges [][2]int64
}

// Fd reports no descriptor, so allocations reach Preallocate.
func (r *allocRecorder) Fd() uintptr { return vfs.InvalidFd }

func (r *allocRecorder) Preallocate(offset, length int64) error {
	r.ranges = append(r.ranges, [2]int64{offset, length})
	return nil
}

// A WAL's blocks are allocated a step ahead of its appends, contiguously,
// never past the range Pebble asked for: every append lands in blocks
// allocated before it, and an idle WAL holds a step, not the whole range.
func TestWALBlocksAreAllocatedAStepAheadOfItsWrites(t *testing.T) {
	const wanted = 35 << 20
	f := &allocRecorder{}
	p := &preallocation{}
	require.NoError(t, p.request(f, 0, wanted))
	require.Equal(t, [][2]int64{{0, walPreallocStep}}, f.ranges, "an idle WAL holds one step")

	var pos int64
	for pos < wanted+3*walPreallocStep {
		n := 48 << 10
		covered := int64(0)
		for _, r := range f.ranges {
			require.Equal(t, covered, r[0], "allocations are contiguous")
			covered = r[0] + r[1]
		}
		if pos+int64(n) <= wanted {
			require.GreaterOrEqual(t, covered, pos+int64(n), "the append at %d lands in allocated blocks", pos)
		}
		require.LessOrEqual(t, covered, min(int64(wanted), pos+walPreallocStep), "at most a step ahead, within the range asked for")
		p.wrote(f, n)
		pos += int64(n)
	}
	require.Equal(t, int64(wanted), f.ranges[len(f.ranges)-1][0]+f.ranges[len(f.ranges)-1][1])

	// Pebble's next block (its own preallocation reaches past the first
	// range) extends what is allocated, a step at a time again.
	require.NoError(t, p.request(f, wanted, wanted))
	last := f.ranges[len(f.ranges)-1]
	require.Equal(t, [2]int64{wanted, pos + walPreallocStep - wanted}, last)
}

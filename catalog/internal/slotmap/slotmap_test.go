package slotmap

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkChunks fails unless the chunks are non-empty, within their bound,
// in strictly increasing key order throughout, and counted right.
func checkChunks[E entry](t *testing.T, s *chunks[E]) {
	t.Helper()
	n := 0
	var prev int64 = -1
	for i, c := range s.c {
		require.NotEmpty(t, c, "chunk %d", i)
		require.LessOrEqual(t, len(c), chunkCap, "chunk %d", i)
		for _, e := range c {
			require.Greater(t, int64(key(e)), prev, "chunk %d out of order", i)
			prev = int64(key(e))
		}
		n += len(c)
	}
	require.Equal(t, n, s.n)
}

func TestMapAgainstAGoMap(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 7))
		var m Map
		ref := map[uint32]uint32{}
		next := uint32(0)
		for i := range 100_000 {
			switch op := r.IntN(10); {
			case op < 4: // a fresh, growing slot, as a counter hands them out
				v := r.Uint32()
				_, had := ref[next] // the case below may have put it
				require.Equal(t, !had, m.Put(next, v))
				ref[next] = v
				next++
			case op < 6: // any slot, possibly present
				s, v := r.Uint32N(next+10), r.Uint32()
				_, had := ref[s]
				require.Equal(t, !had, m.Put(s, v))
				ref[s] = v
			case op < 9: // remove, mostly from the end
				s := r.Uint32N(next + 10)
				if op == 8 && next > 0 {
					s = next - 1 - r.Uint32N(min(next, 3))
				}
				v, ok := m.Remove(s)
				want, had := ref[s]
				require.Equal(t, had, ok)
				require.Equal(t, want, v)
				delete(ref, s)
			default:
				s := r.Uint32N(next + 10)
				v, ok := m.Get(s)
				want, had := ref[s]
				require.Equal(t, had, ok)
				require.Equal(t, want, v)
			}
			if i%10_000 == 0 {
				checkChunks(t, &m.c)
			}
		}
		checkChunks(t, &m.c)
		require.Equal(t, len(ref), m.Len())
		var got []uint32
		m.Each(func(s, v uint32) {
			require.Equal(t, ref[s], v)
			got = append(got, s)
		})
		require.Equal(t, slices.Sorted(maps.Keys(ref)), got)
	}
}

func TestSetAgainstAGoMap(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 7))
	var s Set
	ref := map[uint32]bool{}
	for range 50_000 {
		x := r.Uint32N(5000)
		switch r.IntN(3) {
		case 0, 1:
			require.Equal(t, !ref[x], s.Add(x))
			ref[x] = true
		default:
			require.Equal(t, ref[x], s.Remove(x))
			delete(ref, x)
		}
		require.Equal(t, ref[x], s.Contains(x))
	}
	checkChunks(t, &s.c)
	var got []uint32
	s.Each(func(x uint32) { got = append(got, x) })
	require.Equal(t, slices.Sorted(maps.Keys(ref)), got)
}

func TestAppendsFillChunksWithoutSpareCapacity(t *testing.T) {
	var m Map
	var s Set
	const n = 10 * chunkCap
	for i := range uint32(n) {
		m.Put(i, i)
		s.Add(i)
	}
	for _, c := range m.c.c {
		require.Equal(t, chunkCap, cap(c))
	}
	for _, c := range s.c.c {
		require.Equal(t, chunkCap, cap(c))
	}
	// A small set holds no more than twice its entries.
	var small Set
	for i := range uint32(5) {
		small.Add(i)
	}
	require.LessOrEqual(t, cap(small.c.c[0]), 8)
}

func TestRemovingNewestFirstEmptiesAndFreesTheChunks(t *testing.T) {
	var m Map
	for i := range uint32(3 * chunkCap) {
		m.Put(i, 1)
	}
	for i := 3*chunkCap - 1; i >= 0; i-- {
		_, ok := m.Remove(uint32(i))
		require.True(t, ok)
	}
	require.Zero(t, m.Len())
	require.Nil(t, m.c.c)
}

func TestAMostlyEmptiedChunkGivesMemoryBack(t *testing.T) {
	var s Set
	for i := range uint32(chunkCap) {
		s.Add(i)
	}
	for i := uint32(0); i < chunkCap-10; i++ {
		s.Remove(i)
	}
	require.Len(t, s.c.c, 1)
	require.LessOrEqual(t, cap(s.c.c[0]), 4*len(s.c.c[0]))
	checkChunks(t, &s.c)
}

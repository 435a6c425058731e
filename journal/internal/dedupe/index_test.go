package dedupe

import (
	"hash/maphash"
	"testing"

	"github.com/stretchr/testify/require"
)

// Keys whose hashes collide share a fingerprint and a run of slots: each is
// still found as itself, and a slot whose copy was evicted matches no key,
// so the key's next copy takes a slot of its own.
func TestKeyIndexCollisionsAndEvictedCopies(t *testing.T) {
	var x keyIndex
	x.reset(8, 100)
	seed := maphash.MakeSeed()
	a, b := [16]byte{1}, [16]byte{2}
	order := []Key{{Index: 1, Key: a}, {Index: 2, Key: b}, {Index: 3, Key: a}}
	c := copies{order: order[:2], base: 100, live: 100}
	const h = 5 // both keys hash alike
	x.put(seed, h, a, 100, c)
	x.put(seed, h, b, 101, c)
	_, seq, ok := x.find(h, a, c)
	require.True(t, ok)
	require.Equal(t, uint64(100), seq)
	_, seq, ok = x.find(h, b, c)
	require.True(t, ok)
	require.Equal(t, uint64(101), seq)
	require.Equal(t, 2, x.count)

	c = copies{order: order, base: 100, live: 101} // a's copy at 100 evicted
	slot, _, ok := x.find(h, a, c)
	require.False(t, ok, "an evicted copy matches no key")
	require.Equal(t, uint64(h+2), slot, "the first empty slot after the run")
	x.put(seed, h, a, 102, c)
	_, seq, ok = x.find(h, a, c)
	require.True(t, ok)
	require.Equal(t, uint64(102), seq)
	require.Equal(t, 3, x.count)
}

// A table grows as keys arrive past half load and keeps every live key;
// a huge window allocates no more than maxInitialSlots up front.
func TestKeyIndexGrows(t *testing.T) {
	huge := New(1 << 40)
	require.Len(t, huge.cur.slots, maxInitialSlots)

	d := New(8)
	require.Len(t, d.cur.slots, minSlots)
	keys := make([]Key, 1000) // an image's list, longer than the window
	for i := range keys {
		keys[i] = Key{Index: uint64(i + 1), Key: [16]byte{byte(i), byte(i >> 8), 9}}
	}
	d.Reset(keys)
	require.Equal(t, 1000, d.cur.count)
	require.GreaterOrEqual(t, len(d.cur.slots), 2000)
	for _, k := range keys {
		r, ok := d.lookup(k.Key)
		require.True(t, ok, "key of index %d", k.Index)
		require.Equal(t, Rec{Index: k.Index, Applied: k.Index, Imaged: true}, r)
	}
	_, ok := d.lookup([16]byte{7, 7, 7})
	require.False(t, ok)
}

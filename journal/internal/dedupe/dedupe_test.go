package dedupe

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/envelope"
)

func TestWindowEvictsInOrder(t *testing.T) {
	// The dedupe window is by index distance, and evicts in order.
	d := New(3)
	d.Add(10, [16]byte{1}, "a")
	_, ok := d.Seen(13, [16]byte{1})
	require.True(t, ok)
	_, ok = d.Seen(14, [16]byte{1})
	require.False(t, ok)
	for i := uint64(11); i < 3000; i++ {
		d.Add(i, [16]byte{byte(i), byte(i >> 8), 1}, nil)
	}
	require.Len(t, d.Live(), 4)
	require.LessOrEqual(t, d.cur.count+d.prev.count, 2*4, "two generations of a window at most")
}

// The dedupe state rebuilt from the copies in the window alone (as a
// restart, an image or a shadow checkpoint does) decides every later entry
// as the live applier does, whatever chains of retries came before: with a
// window that counted only applied copies, a rebuild whose scan starts in
// the middle of a chain decides differently.
func TestDedupeRebuiltFromItsWindowDecidesAsLive(t *testing.T) {
	const window, entries = 8, 3000
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][16]byte, entries)
	for i := range keys {
		keys[i] = [16]byte{byte(rng.IntN(6))} // few keys: long chains of copies
	}
	// apply runs entries [from, len) on d and returns which were applied.
	apply := func(d *Window, from int) []bool {
		out := make([]bool, entries)
		for i := from; i < entries; i++ {
			_, dup := d.Seen(uint64(i+1), keys[i])
			d.Add(uint64(i+1), keys[i], nil)
			out[i] = !dup
		}
		return out
	}
	live := apply(New(window), 0)
	for n := window; n < entries; n += 97 {
		rebuilt := New(window)
		for i := n - window; i < n; i++ { // the copies in (n-window, n]
			rebuilt.Add(uint64(i+1), keys[i], nil)
		}
		got := apply(rebuilt, n)
		require.Equal(t, live[n:], got[n:], "rebuilt at index %d", n)

		// An image's key list carries the same state.
		fromImage := New(window)
		fromImage.Reset(imageKeys(keys, n, window))
		got = apply(fromImage, n)
		require.Equal(t, live[n:], got[n:], "from an image's keys at index %d", n)
	}
	// A key seen again within the window of its latest copy is a duplicate
	// even when the applied copy is further back: the window slides.
	d := New(3)
	d.Add(10, [16]byte{9}, "a")
	d.Add(13, [16]byte{9}, nil) // duplicate of 10
	r, dup := d.Seen(16, [16]byte{9})
	require.True(t, dup)
	require.Equal(t, uint64(13), r.Index)
	require.Equal(t, uint64(10), r.Applied)
	require.Equal(t, "a", r.Value)
	_, dup = d.Seen(17, [16]byte{9})
	require.False(t, dup)
}

// imageKeys is the key list an image at index n carries: every copy in
// (n-window, n], in order.
func imageKeys(keys [][16]byte, n, window int) []Key {
	var out []Key
	for i := n - window; i < n; i++ {
		out = append(out, Key{Index: uint64(i + 1), Key: keys[i]})
	}
	return out
}

// Copies of one proposal that land more than a window apart: the journal's
// own copies (carrying since) apply once; a caller's retries (no since)
// keep the documented window semantics.
func TestDedupeCopiesAWindowApart(t *testing.T) {
	const window = 8
	key := [16]byte{3}
	// judgeAll judges copies given as (index, since) pairs, in order; since
	// 0 stands for a copy without one (a caller's own retry).
	judgeAll := func(copies ...[2]uint64) []Verdict {
		d := New(window)
		var out []Verdict
		for _, c := range copies {
			env := envelope.Envelope{Kind: envelope.KindUser, Key: key, Since: c[1], Bounded: c[1] > 0}
			_, v := d.Judge(c[0], env)
			if v != Expired {
				d.Add(c[0], env.Key, nil)
			}
			out = append(out, v)
		}
		return out
	}
	// Proposed when the commit index was 100: the first copy lands at 101,
	// re-proposals a window and more later.
	require.Equal(t, []Verdict{Apply, Expired},
		judgeAll([2]uint64{101, 100}, [2]uint64{101 + window + 1, 100}))
	require.Equal(t, []Verdict{Apply, Duplicate, Expired},
		judgeAll([2]uint64{101, 100}, [2]uint64{105, 100}, [2]uint64{101 + 3*window, 100}))
	// The first copy was lost: a late one expires (and is not recorded),
	// and the proposer's next copy, with a newer since, applies.
	require.Equal(t, []Verdict{Expired, Apply},
		judgeAll([2]uint64{100 + window + 1, 100}, [2]uint64{115, 110}))
	// A copy exactly a window after since still applies.
	require.Equal(t, []Verdict{Apply}, judgeAll([2]uint64{100 + window, 100}))
	// Without since (a caller's own retries), a copy more than a window
	// after the previous one applies again, as ProposeWithKey documents.
	require.Equal(t, []Verdict{Apply, Apply},
		judgeAll([2]uint64{101, 0}, [2]uint64{101 + window + 1, 0}))
}

// Record of what Judge decided leaves the window as Add of the same copy
// does, duplicates and evictions included.
func TestRecordOfAJudgedCopyIsAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	added, recorded := New(16), New(16)
	for i := uint64(1); i < 2000; i++ {
		key := [16]byte{byte(rng.IntN(24))}
		prev, v := recorded.Judge(i, envelope.Envelope{Kind: envelope.KindUser, Key: key})
		require.NotEqual(t, Expired, v)
		recorded.Record(i, key, prev, v, i)
		added.Add(i, key, i)
		require.Equal(t, added.Live(), recorded.Live(), "after index %d", i)
		require.Equal(t, added.recs[added.head:], recorded.recs[recorded.head:], "after index %d", i)
	}
}

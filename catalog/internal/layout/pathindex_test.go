package layout

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

func TestLevelHash(t *testing.T) {
	x := newPathIndex()
	seen := map[uint64]string{}
	note := func(depth int, name []byte) {
		key := fmt.Sprintf("%d:%q", depth, name)
		h := x.Level(depth, name)
		if prev, dup := seen[h]; dup && prev != key {
			t.Fatalf("level %s and %s hash alike", prev, key)
		}
		seen[h] = key
	}
	for n := range 40 {
		name := bytes.Repeat([]byte{'a'}, n)
		note(1, name)
		for i := range n {
			for _, c := range []byte{'b', 0x80, 0} {
				v := bytes.Clone(name)
				v[i] = c
				note(1, v)
			}
		}
		for d := 2; d < 40; d++ {
			note(d, name)
		}
	}
}

func TestNameWords(t *testing.T) {
	for n := 1; n <= 16; n++ {
		name := bytes.Repeat([]byte{'a'}, n)
		a0, b0 := nameWords(name)
		for i := range n {
			v := bytes.Clone(name)
			v[i] = 'b'
			if a, b := nameWords(v); a == a0 && b == b0 {
				t.Fatalf("%q and %q have the same words", name, v)
			}
		}
	}
}

func TestPathIndexProbe(t *testing.T) {
	visit := func(x *PathIndex, h uint64) []uint64 {
		var got []uint64
		for i, b := range x.probe(h) {
			if b != &x.buckets[i] {
				t.Fatalf("probe(%d) yielded bucket %d with another bucket's pointer", h, i)
			}
			got = append(got, i)
		}
		return got
	}
	x := PathIndex{buckets: make([]pathBucket, 4)}
	for _, c := range []struct {
		overflow [4]uint32
		h        uint64
		want     []uint64
	}{
		{[4]uint32{}, 6, []uint64{2}},
		{[4]uint32{0, 0, 1, 0}, 2, []uint64{2, 3}},
		{[4]uint32{0, 0, 1, 2}, 7, []uint64{3, 0}},
		{[4]uint32{1, 0, 1, 2}, 6, []uint64{2, 3, 0, 1}},
		{[4]uint32{1, 1, 1, 1}, 1, []uint64{1, 2, 3, 0}},
	} {
		for i, o := range c.overflow {
			x.buckets[i].overflow = o
		}
		if got := visit(&x, c.h); !slices.Equal(got, c.want) {
			t.Errorf("overflows %v: probe(%d) = %v, want %v", c.overflow, c.h, got, c.want)
		}
	}
	// A body that breaks ends the sequence at once.
	n := 0
	for range x.probe(0) {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("a loop that breaks saw %d buckets", n)
	}
}

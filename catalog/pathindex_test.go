package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// slowResolve is resolve through the sorted child lists alone, the
// reference the path index must agree with.
func slowResolve(s *state, path string) (uint32, bool) {
	if path == "/" {
		return rootSlot, true
	}
	slot := uint32(rootSlot)
	for _, name := range strings.Split(path[1:], "/") {
		c, ok := s.child(slot, []byte(name))
		if !ok {
			return 0, false
		}
		slot = c
	}
	return slot, true
}

// checkPathIndex checks that the path index of tr holds exactly its nodes
// (each found under its parent and name, nothing else held) and that every
// bucket's overflow counts the entries that passed it.
func checkPathIndex(t testing.TB, tr *Tree) {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	s := tr.s
	x := &s.paths
	live := 0
	for slot := uint32(0); slot < s.nslots; slot++ {
		r := s.at(slot)
		if r.id == 0 || r.id == rootID {
			continue
		}
		live++
		if got, ok := x.find(s, x.childKey(s, r.parent, s.name(slot)), r.parent, s.name(slot)); !ok || got != slot {
			t.Fatalf("path index: child %q of slot %d is slot %d, %v; want %d", s.name(slot), r.parent, got, ok, slot)
		}
	}
	if x.n != live {
		t.Fatalf("path index holds %d entries, the tree %d nodes below the root", x.n, live)
	}
	m := uint64(len(x.buckets) - 1)
	want := make([]uint32, len(x.buckets))
	held := 0
	for i := range x.buckets {
		b := &x.buckets[i]
		for j, tag := range b.tags {
			if tag == 0 {
				continue
			}
			held++
			slot := b.slots[j]
			r := s.at(slot)
			if r.id == 0 || r.id == rootID {
				t.Fatalf("path index holds slot %d, which is free or the root", slot)
			}
			h := x.childKey(s, r.parent, s.name(slot))
			if tagOf(h) != tag {
				t.Fatalf("slot %d has tag %d, its hash says %d", slot, tag, tagOf(h))
			}
			for k := h & m; k != uint64(i); k = (k + 1) & m {
				want[k]++
			}
		}
	}
	if held != x.n {
		t.Fatalf("path index counts %d entries and holds %d", x.n, held)
	}
	for i := range x.buckets {
		if x.buckets[i].overflow != want[i] {
			t.Fatalf("bucket %d: overflow %d, %d entries passed it", i, x.buckets[i].overflow, want[i])
		}
	}
}

// checkResolve checks resolve against slowResolve for every node's path
// and for paths that do not exist (a missing last level, a missing middle
// level, a name of another level).
func checkResolve(t testing.TB, tr *Tree) {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	s := tr.s
	var paths []string
	for slot := uint32(0); slot < s.nslots; slot++ {
		if r := s.at(slot); r.id != 0 {
			p := s.pathOf(slot)
			paths = append(paths, p)
			if p != "/" {
				paths = append(paths, p+"x", p+"/nope", p+"/nope/deeper", "/nope"+p)
			}
		}
	}
	for _, p := range paths {
		got, ok := s.resolve(p)
		want, wok := slowResolve(s, p)
		if ok != wok || got != want {
			t.Fatalf("resolve(%q) = %d, %v; the child lists say %d, %v", p, got, ok, want, wok)
		}
	}
}

// withHashMask runs fn with new path indexes masking their hashes with
// mask: 0 puts every entry in one probe chain with one tag, a few bits
// make names collide in buckets and tags.
func withHashMask(mask uint64, fn func()) {
	defer func(m uint64) { pathHashMask = m }(pathHashMask)
	pathHashMask = mask
	fn()
}

// eachHashMask runs fn as a subtest for each of masks, under
// withHashMask.
func eachHashMask(t *testing.T, masks []hashMask, fn func(t *testing.T, mask uint64)) {
	for _, hm := range masks {
		t.Run(hm.name, func(t *testing.T) {
			withHashMask(hm.mask, func() { fn(t, hm.mask) })
		})
	}
}

type hashMask struct {
	name string
	mask uint64
}

var hashMasks = []hashMask{
	{"mask=all", ^uint64(0)},
	{"mask=3-bits", 0x7},
	{"mask=tag-and-2-bits", 0xff00000000000003},
	{"mask=none", 0},
}

// TestPathIndexCollisions builds, moves, deletes and rolls back under
// hashes that collide (down to all of them equal): every answer must still
// be exact.
func TestPathIndexCollisions(t *testing.T) {
	eachHashMask(t, hashMasks, func(t *testing.T, mask uint64) {
		tr := New()
		var ops []Op
		for d := range 3 {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d%d", d), Kind: "dir"})
			for f := range 40 {
				ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d%d/f%d", d, f), Kind: "file"})
				// The same names under other parents.
				ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d%d/f%d/d%d", d, f, d), Kind: "file"})
			}
		}
		mustApply(t, tr, 1, Batch{Ops: ops})
		checkPathIndex(t, tr)
		checkResolve(t, tr)

		mustApply(t, tr, 2, Batch{Ops: []Op{
			{Type: OpMove, Path: "/d0/f3", To: "/d1/f3x"},
			{Type: OpMove, Path: "/d2", To: "/d1/f3x/d2"},
			{Type: OpDelete, Path: "/d1/f7", Recursive: true},
		}})
		checkPathIndex(t, tr)
		checkResolve(t, tr)
		if _, ok := tr.Get("/d1/f3x/d2/f39/d2"); !ok {
			t.Fatal("a node moved with its parent's parent is not found at its new path")
		}
		for _, p := range []string{"/d2", "/d0/f3", "/d1/f7", "/d1/f7/d1"} {
			if _, ok := tr.Get(p); ok {
				t.Fatalf("%s is found after it was moved or deleted", p)
			}
		}
	})
}

// TestPathIndexRollback fails batches that created (enough to grow the
// table), moved, renamed and deleted nodes: the index must hold the tree's
// nodes exactly as before.
func TestPathIndexRollback(t *testing.T) {
	eachHashMask(t, hashMasks[:3], func(t *testing.T, mask uint64) {
		tr := New()
		mustApply(t, tr, 1, Batch{Ops: []Op{
			{Type: OpCreate, Path: "/a", Kind: "dir"},
			{Type: OpCreate, Path: "/a/b", Kind: "dir"},
			{Type: OpCreate, Path: "/a/b/c", Kind: "dir"},
			{Type: OpCreate, Path: "/z", Kind: "dir"},
		}})
		before := len(tr.s.paths.buckets)
		var ops []Op
		for i := range 2000 {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/a/n%d", i), Kind: "file"})
		}
		ops = append(ops,
			Op{Type: OpMove, Path: "/a/b", To: "/z/b2"},
			Op{Type: OpDelete, Path: "/a", Recursive: true},
			Op{Type: OpCreate, Path: "/a", Kind: "dir"},
			Op{Type: OpCreate, Path: "/a", Kind: "dir"}, // fails: exists
		)
		res := tr.Apply(2, encode(t, ops...)).(*Result)
		if res.Err == nil {
			t.Fatal("the batch did not fail")
		}
		if len(tr.s.paths.buckets) <= before {
			t.Fatalf("the table did not grow inside the batch (%d buckets)", before)
		}
		checkPathIndex(t, tr)
		checkResolve(t, tr)
		if _, ok := tr.Get("/a/b/c"); !ok {
			t.Fatal("/a/b/c is missing after the rollback")
		}
		for _, p := range []string{"/a/n0", "/a/n1999", "/z/b2", "/z/b2/c"} {
			if _, ok := tr.Get(p); ok {
				t.Fatalf("%s survives the rollback", p)
			}
		}
	})
}

// TestPathIndexDeleteSubtree deletes a subtree of thousands of nodes: none
// of them may stay in the index.
func TestPathIndexDeleteSubtree(t *testing.T) {
	tr := New()
	var ops []Op
	ops = append(ops, Op{Type: OpCreate, Path: "/keep", Kind: "dir"}, Op{Type: OpCreate, Path: "/big", Kind: "dir"})
	for i := range 100 {
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/big/t%d", i), Kind: "dir"})
		for j := range 30 {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/big/t%d/r%d", i, j), Kind: "file"})
		}
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	mustApply(t, tr, 2, Batch{Ops: []Op{{Type: OpDelete, Path: "/big", Recursive: true}}})
	checkPathIndex(t, tr)
	if n := tr.s.paths.n; n != 1 {
		t.Fatalf("the index holds %d entries, want 1 (/keep)", n)
	}
	if _, ok := tr.Get("/big/t5/r7"); ok {
		t.Fatal("a deleted node is found")
	}
	// The freed slots are reused under the same names.
	mustApply(t, tr, 3, Batch{Ops: []Op{{Type: OpCreate, Path: "/big", Kind: "dir"}, {Type: OpCreate, Path: "/big/t5", Kind: "dir"}}})
	checkPathIndex(t, tr)
	checkResolve(t, tr)
}

// TestPathIndexLoad loads images whose nodes come after nodes moved under
// them (their parents are linked last) and images large enough for the
// loader to size the table from the header's count.
func TestPathIndexLoad(t *testing.T) {
	eachHashMask(t, hashMasks[:3], func(t *testing.T, mask uint64) {
		for _, src := range []*Tree{sampleTree(t), wideTree(t)} {
			loadBothWays(t, saveBytes(t, src), func(careful bool, c *Tree) {
				checkPathIndex(t, c)
				checkResolve(t, c)
			})
		}
		// A catalog of several image blocks, which Load links
		// batch by batch. Under colliding hashes every probe
		// walks a chain as long as the entries that share a
		// hash, so those catalogs are kept to two blocks.
		parents := 50
		if mask != ^uint64(0) {
			parents = 15
		}
		big := New()
		var ops []Op
		for i := range parents {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/p%d", i), Kind: "dir"})
			for j := range 400 {
				ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/p%d/c%d", i, j), Kind: "file"})
			}
		}
		mustApply(t, big, 1, Batch{Ops: ops})
		c := New()
		if err := c.Load(bytes.NewReader(saveBytes(t, big))); err != nil {
			t.Fatal(err)
		}
		checkPathIndex(t, c)
		checkResolve(t, c)
	})
}

// TestPathIndexDeep resolves paths deeper than the two-pass lookup takes.
func TestPathIndexDeep(t *testing.T) {
	tr := New()
	var ops []Op
	p := ""
	for i := range 3 * guessDepth {
		p += fmt.Sprintf("/l%d", i%3)
		ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "dir"})
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	checkResolve(t, tr)
	if _, ok := tr.Get(p); !ok {
		t.Fatalf("%d levels deep: not found", 3*guessDepth)
	}
}

// TestPathIndexAgainstLists applies random batches (creates, moves,
// renames, deletes; many fail) under colliding hashes and checks the index
// against the child lists after each.
func TestPathIndexAgainstLists(t *testing.T) {
	eachHashMask(t, hashMasks[1:3], func(t *testing.T, mask uint64) {
		r := rand.New(rand.NewPCG(7, 11))
		m := newModel()
		tr := New()
		for i := uint64(1); i <= 400; i++ {
			b := randBatch(r, m)
			data, err := b.Encode()
			if err != nil {
				t.Fatal(err)
			}
			applyChecked(t, tr, m, i, b, data)
			checkPathIndex(t, tr)
			checkResolve(t, tr)
		}
		m.check(t, tr)
	})
}

// FuzzPathIndex applies batches made from the fuzzer's bytes with hashes
// narrowed to a few bits, and checks the index against the child lists.
func FuzzPathIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("create move delete rollback"))
	f.Fuzz(func(t *testing.T, seed []byte) {
		withHashMask(0xf, func() {
			var s1, s2 uint64
			for i, c := range seed {
				if i%2 == 0 {
					s1 = s1*131 + uint64(c)
				} else {
					s2 = s2*131 + uint64(c)
				}
			}
			// The input seeds the index's hash too, so that a failing
			// input reproduces: the hash decides what collides.
			defer func(p *[4]uint64) { pathHashSeed = p }(pathHashSeed)
			pathHashSeed = &[4]uint64{s1, s2, s1 ^ s2, s1 + s2}
			r := rand.New(rand.NewPCG(s1, s2))
			m := newModel()
			tr := New()
			for i := uint64(1); i <= 60; i++ {
				b := randBatch(r, m)
				data, err := b.Encode()
				if err != nil {
					t.Fatal(err)
				}
				applyChecked(t, tr, m, i, b, data)
			}
			checkPathIndex(t, tr)
			checkResolve(t, tr)
		})
	})
}

// TestGetPathAllocs pins Get by path at zero allocations: found, missing,
// past a tag shared by another entry, deeper than the two-pass lookup, and
// invalid (rejected as the path is read).
func TestGetPathAllocs(t *testing.T) {
	withHashMask(0x3, func() {
		tr := New()
		var ops []Op
		for i := range 50 {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "dir"})
		}
		deep := ""
		for i := range guessDepth + 2 {
			deep += fmt.Sprintf("/n%d", i)
			ops = append(ops, Op{Type: OpCreate, Path: "/n0" + deep, Kind: "dir"})
		}
		mustApply(t, tr, 1, Batch{Ops: ops})
		for _, c := range []struct {
			path string
			ok   bool
		}{{"/n49", true}, {"/n7", true}, {"/n0" + deep, true}, {"/n50", false}, {"/n3/x", false},
			{"/n3//n1", false}, {"/n3/", false}, {"/n\xff", false}, {"/n0" + deep + "/\x00", false}, {"n3", false}} {
			found := false
			read := func(r Reader) { _, found = r.Get(c.path) }
			if a := testing.AllocsPerRun(100, func() { tr.Read(read) }); a != 0 {
				t.Errorf("Get(%q): %v allocations, want 0", c.path, a)
			}
			if found != c.ok {
				t.Errorf("Get(%q) found %v, want %v", c.path, found, c.ok)
			}
		}
	})
}

// TestResolveInvalidPaths checks that resolve, which validates a path as
// it reads it, agrees with ValidPath and the child lists: found exactly
// when the path is valid and the lists hold a node there. The paths are
// random strings of names, slashes and the bytes ValidName rejects, over
// a tree whose names hold the bytes it accepts ('.', UTF-8); the tree is
// deep enough for the level-by-level walk.
func TestResolveInvalidPaths(t *testing.T) {
	names := []string{"a", ".a", "a.", "...", "é", "aé", "a.b", strings.Repeat("n", MaxNameLen), "tablet1234567", "a-long-name-past-sixteen-bytes"}
	tr := New()
	var ops []Op
	var add func(prefix string, depth int)
	add = func(prefix string, depth int) {
		for i, n := range names {
			if depth > 1 && i%3 != depth%3 {
				continue
			}
			p := prefix + "/" + n
			ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "dir"})
			if depth < 3 {
				add(p, depth+1)
			}
		}
	}
	add("", 1)
	deep := ""
	for i := range guessDepth + 3 {
		deep += "/" + names[i%3]
		ops = append(ops, Op{Type: OpCreate, Path: "/a" + deep, Kind: "dir"})
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	tokens := append([]string{"/", "/", "//", ".", "..", "", "\x00", "\x1f", "\x7f", "\xff", "\xc3", "\xa9", "a\x00"}, names...)
	r := rand.New(rand.NewPCG(1, 2))
	paths := []string{"", "/", "a", "a/", "/a/", "//a", "/a//a", "/./a", "/a/..", "/a/../a", "/a/.", "/" + strings.Repeat("n", MaxNameLen+1),
		"/a" + deep, "/a" + deep + "/", "/a" + deep + "/.", "/a" + deep[:len(deep)-2] + "\xff", "/a" + deep + "/a\x00",
		"/" + strings.Repeat("a/", MaxPathLen/2) + "a"}
	for range 20000 {
		p := "/a/a"[:r.IntN(5)]
		for range 1 + r.IntN(6) {
			p += tokens[r.IntN(len(tokens))]
		}
		paths = append(paths, p)
	}
	found := 0
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	s := tr.s
	for _, p := range paths {
		got, ok := s.resolve(p)
		want, wok := uint32(0), false
		if ValidPath(p) == nil {
			want, wok = slowResolve(s, p)
		}
		if ok != wok || got != want {
			t.Fatalf("resolve(%q) = %d, %v; ValidPath says %v, the child lists %d, %v", p, got, ok, ValidPath(p), want, wok)
		}
		if ok {
			found++
		}
	}
	if found < len(paths)/50 {
		t.Fatalf("only %d of %d paths found: the test reads too few nodes", found, len(paths))
	}
}

// TestResolvePathTooLong moves a chain of nodes below another, so that the
// deepest paths get longer than MaxPathLen: a Get of those is not found,
// as ValidPath rejects them, though the nodes exist.
func TestResolvePathTooLong(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen)
	tr := New()
	var ops []Op
	for _, top := range []string{"/a", "/b"} {
		p := top
		ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "dir"})
		for range 150 {
			p += "/" + long
			ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "dir"})
		}
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	under := "/a" + strings.Repeat("/"+long, 150)
	mustApply(t, tr, 2, Batch{Ops: []Op{{Type: OpMove, Path: "/b", To: under + "/b"}}})
	fits := under + "/b" + strings.Repeat("/"+long, 1)
	tooLong := under + "/b" + strings.Repeat("/"+long, 150)
	if _, ok := tr.Get(fits); !ok {
		t.Fatalf("a path of %d bytes is not found", len(fits))
	}
	tr.Read(func(r Reader) {
		if _, ok := r.Get(tooLong); ok {
			t.Fatalf("a path of %d bytes (more than MaxPathLen) is found", len(tooLong))
		}
	})
	if _, ok := tr.Get(tooLong); ok {
		t.Fatalf("Tree.Get of a path of %d bytes (more than MaxPathLen) finds it", len(tooLong))
	}
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if _, ok := slowResolve(tr.s, tooLong); !ok {
		t.Fatal("the child lists do not hold the node either: the test proves nothing")
	}
}

// TestLevelHash checks that the term of a level depends on every byte of
// its name and on its depth: names that differ in one byte, or only in
// length, and one name at different depths all get different terms.
func TestLevelHash(t *testing.T) {
	x := newPathIndex()
	seen := map[uint64]string{}
	note := func(depth int, name []byte) {
		key := fmt.Sprintf("%d:%q", depth, name)
		h := x.level(depth, name)
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

// TestNameWords checks that the words of names (nameWords) hold every byte:
// names of one length that differ in any one byte have different words.
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

// TestPathIndexLookupEndsWhenEveryBucketOverflows: after enough churn
// every bucket may count entries that passed it (FuzzPathIndex reached
// that state under colliding hashes), so no probe ends at a bucket without
// overflow; a lookup of a path nobody holds, by a reader or by the
// applier, must still end, and every answer stay exact.
func TestPathIndexLookupEndsWhenEveryBucketOverflows(t *testing.T) {
	eachHashMask(t, hashMasks, func(t *testing.T, mask uint64) {
		tr := New()
		var ops []Op
		for i := range 40 {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d%d", i), Kind: "dir"})
		}
		mustApply(t, tr, 1, Batch{Ops: ops})
		for i := range tr.s.paths.buckets {
			tr.s.paths.buckets[i].overflow++
		}
		// A probe that went round the table for ever would hang here until
		// the test binary's -timeout, whose goroutine dump shows the loop.
		for _, p := range []string{"/nope", "/d1/nope", "/nope/deeper"} {
			if _, ok := tr.Get(p); ok {
				t.Fatalf("Get(%q) found a node nobody created", p)
			}
		}
		if _, ok := tr.Get("/d39"); !ok {
			t.Fatal("Get(/d39) did not find it")
		}
		res := tr.Apply(2, encode(t, Op{Type: OpUpdate, Path: "/nope", Set: map[string]Value{"a": Int(1)}})).(*Result)
		if !errors.Is(res.Err, ErrNotFound) {
			t.Fatalf("updating /nope: %v, want ErrNotFound", res.Err)
		}
		res = tr.Apply(3, encode(t,
			Op{Type: OpUpdate, Path: "/d7", Set: map[string]Value{"a": Int(1)}},
			Op{Type: OpCreate, Path: "/d7/e", Kind: "file"},
		)).(*Result)
		if res.Err != nil {
			t.Fatalf("updating /d7 and creating /d7/e: %v", res.Err)
		}
		if _, ok := tr.Get("/d7/e"); !ok {
			t.Fatal("Get(/d7/e) did not find the node just created")
		}
	})
}

// TestPathIndexProbe checks the one probe sequence: from the key's home
// bucket on, wrapping, through every bucket that entries passed full, to
// the first that none did, and never past the table's every bucket.
func TestPathIndexProbe(t *testing.T) {
	visit := func(x *pathIndex, h uint64) []uint64 {
		var got []uint64
		for i, b := range x.probe(h) {
			if b != &x.buckets[i] {
				t.Fatalf("probe(%d) yielded bucket %d with another bucket's pointer", h, i)
			}
			got = append(got, i)
		}
		return got
	}
	x := pathIndex{buckets: make([]pathBucket, 4)}
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

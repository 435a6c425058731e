package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/metatree/metatree/catalog/internal/layout"
)

// slowResolve is resolve through the sorted child lists alone, the
// reference the path index must agree with.
func slowResolve(s *state, path string) (uint32, bool) {
	if path == "/" {
		return layout.RootSlot, true
	}
	slot := uint32(layout.RootSlot)
	for _, name := range strings.Split(path[1:], "/") {
		c, ok := s.Child(slot, []byte(name))
		if !ok {
			return 0, false
		}
		slot = c
	}
	return slot, true
}

// checkPathIndex checks that the path index of tr holds exactly its nodes
// (layout.Store.CheckPaths).
func checkPathIndex(t testing.TB, tr *Tree) {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if err := tr.s.CheckPaths(); err != nil {
		t.Fatal(err)
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
	for slot := uint32(0); slot < s.NSlots; slot++ {
		if r := s.At(slot); r.ID != 0 {
			p := s.PathOf(slot)
			paths = append(paths, p)
			if p != "/" {
				paths = append(paths, p+"x", p+"/nope", p+"/nope/deeper", "/nope"+p)
			}
		}
	}
	for _, p := range paths {
		got, ok := s.Resolve(p)
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
	defer func(m uint64) { layout.HashMask = m }(layout.HashMask)
	layout.HashMask = mask
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
		before := tr.s.Paths.Buckets()
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
		if tr.s.Paths.Buckets() <= before {
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
	if n := tr.s.Paths.Len(); n != 1 {
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
	for i := range 3 * layout.GuessDepth {
		p += fmt.Sprintf("/l%d", i%3)
		ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "dir"})
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	checkResolve(t, tr)
	if _, ok := tr.Get(p); !ok {
		t.Fatalf("%d levels deep: not found", 3*layout.GuessDepth)
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
			defer func(p *[4]uint64) { layout.HashSeed = p }(layout.HashSeed)
			layout.HashSeed = &[4]uint64{s1, s2, s1 ^ s2, s1 + s2}
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
		for i := range layout.GuessDepth + 2 {
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
	for i := range layout.GuessDepth + 3 {
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
		got, ok := s.Resolve(p)
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
// TestNameWords checks that the words of names (nameWords) hold every byte:
// names of one length that differ in any one byte have different words.
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
		tr.s.Paths.OverflowEveryBucket()
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

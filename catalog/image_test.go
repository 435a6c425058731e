package catalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/imagefmt"
)

// sampleTree is a small tree with every value type, a move, deletes that
// leave id holes, and a secondary index.
func sampleTree(t testing.TB) *Tree {
	tr := New()
	mustApply(t, tr, 3, Batch{Ops: []Op{
		{Type: OpCreateIndex, Kind: "replica", Attr: "worker"},
		{Type: OpCreate, Path: "/db1", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
		{Type: OpCreate, Path: "/db1/t1", Kind: "table", Set: map[string]Value{"rows": Int(-3), "hot": Bool(true), "key": Bytes([]byte{1, 2})}},
		{Type: OpCreate, Path: "/db1/t1/r1", Kind: "replica", Set: map[string]Value{"worker": Int(7)}},
		{Type: OpCreate, Path: "/db1/t1/r2", Kind: "replica", Set: map[string]Value{"worker": Int(8)}},
		{Type: OpCreate, Path: "/tmp", Kind: "dir"},
	}})
	mustApply(t, tr, 9, Batch{Ops: []Op{
		{Type: OpDelete, Path: "/tmp"},
		{Type: OpMove, Path: "/db1/t1/r2", To: "/db1/r2"},
		{Type: OpUpdate, Path: "/", Set: map[string]Value{"cluster": String("c1")}},
	}})
	return tr
}

func TestSaveLoadRoundTrip(t *testing.T) {
	tr := sampleTree(t)
	img := saveBytes(t, tr)
	c := New()
	if err := c.Load(bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(saveBytes(t, c), img) {
		t.Fatal("save after load differs")
	}
	if c.Index() != 9 || c.Len() != tr.Len() {
		t.Fatalf("loaded index %d, %d nodes", c.Index(), c.Len())
	}
	n, ok := c.Get("/db1/r2")
	if !ok || n.Attrs["worker"].Int64() != 8 || n.Modified != 9 || n.Created != 3 {
		t.Fatalf("moved node after load: %+v", n)
	}
	if got := c.Find("replica", "worker", Int(7)); len(got) != 1 || got[0].Path != "/db1/t1/r1" || !c.HasIndex("replica", "worker") {
		t.Fatalf("index after load: %+v", got)
	}
	if root, _ := c.Get("/"); root.Attrs["cluster"].Str() != "c1" || root.ID != 1 {
		t.Fatalf("root after load: %+v", root)
	}
	// Ids continue from the saved counter, not from the node count.
	res := mustApply(t, c, 10, Batch{Ops: []Op{{Type: OpCreate, Path: "/x", Kind: "dir"}}})
	res2 := mustApply(t, tr, 10, Batch{Ops: []Op{{Type: OpCreate, Path: "/x", Kind: "dir"}}})
	if res.IDs[0] != res2.IDs[0] {
		t.Fatalf("id after load %d, original %d", res.IDs[0], res2.IDs[0])
	}
	// Load must not read past the end of the body.
	r := bytes.NewReader(append(append([]byte{}, img...), "TRAILER"...))
	if err := New().Load(r); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "TRAILER" {
		t.Fatalf("Load consumed bytes after the body; left %q", rest)
	}
}

func TestLoadRejectsTruncationAndCorruption(t *testing.T) {
	tr := sampleTree(t)
	img := saveBytes(t, tr)
	before := saveBytes(t, tr)
	for n := 0; n < len(img); n++ {
		err := tr.Load(bytes.NewReader(img[:n]))
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(img), err)
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 2000; i++ {
		bad := append([]byte{}, img...)
		pos := r.IntN(len(bad))
		bad[pos] ^= byte(1 + r.IntN(255))
		err := tr.Load(bytes.NewReader(bad))
		if pos == len(imagefmt.Magic) {
			if !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("flipped version byte: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", pos, err)
		}
	}
	if !bytes.Equal(saveBytes(t, tr), before) {
		t.Fatal("a failed Load changed the tree")
	}
}

func TestLoadReportsReadErrors(t *testing.T) {
	img := saveBytes(t, sampleTree(t))
	boom := errors.New("disk on fire")
	err := New().Load(io.MultiReader(bytes.NewReader(img[:20]), errReader{boom}))
	if !errors.Is(err, boom) {
		t.Fatalf("Load error %v, want the reader's error", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type failWriter struct{ after int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(p), nil
}

func TestSaveReportsWriteErrors(t *testing.T) {
	tr := sampleTree(t)
	for n := 0; n < 3; n++ {
		if err := tr.Save(&failWriter{after: n}); err == nil {
			t.Fatalf("Save with a writer failing after %d writes succeeded", n)
		}
	}
}

// FuzzLoad: arbitrary bytes never panic Load; they load (and then save back
// to the same bytes) or fail. The fuzzer mostly hits checksums, so each
// input is also run with checksums off to reach the record decoder.
func FuzzLoad(f *testing.F) {
	f.Add(saveBytes(f, sampleTree(f)))
	f.Add(saveBytes(f, New()))
	f.Add([]byte(imagefmt.Magic))
	f.Add(saveBytes(f, wideTree(f)))
	f.Add(saveBytes(f, ownedImageTree(f)))
	f.Add(handImage([]imgRec{{id: 1}, {2, 4, "x", "d"}, {3, 1, "b", "d"}, {4, 1, "a", "d"}}))
	// Crafted: a node id of 2^34, a header's next id of 2^62, a block
	// that claims 8 MiB.
	f.Add(handImage([]imgRec{{id: 1}, {2, 1, "a", "k"}, {1 << 34, 2, "b", "k"}}))
	f.Add(handImageNext([]imgRec{{id: 1}, {2, 1, "a", "k"}}, 1<<62))
	f.Add([]byte(imagefmt.Magic + "\x01\x80\x80\x80\x04"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := New()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := tr.Load(bytes.NewReader(data))
		runtime.ReadMemStats(&after)
		// What Load allocates follows its input: a fixed cost, and at
		// most what the records could need, a few dozen KiB a byte
		// (levels of the id table, the path index sized by the header).
		if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20+uint64(len(data))<<16 {
			t.Fatalf("Load allocated %d bytes for %d bytes of input", n, len(data))
		}
		if err == nil {
			out := saveBytes(t, tr)
			if !bytes.Equal(out, data[:len(out)]) {
				t.Fatal("a loaded image saves differently")
			}
			requireDigestConsistent(t, tr)
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("unexpected error: %v", err)
		}
		s, err := readImage(bytes.NewReader(data), false)
		// The fast path must accept exactly what the careful decoder
		// does, with the same result or the same error.
		sc, errc := readImageWith(bytes.NewReader(data), false, true)
		if (err == nil) != (errc == nil) || err != nil && err.Error() != errc.Error() {
			t.Fatalf("fast path: %v; careful decoder: %v", err, errc)
		}
		if err == nil && !bytes.Equal(saveBytes(t, &Tree{s: s}), saveBytes(t, &Tree{s: sc})) {
			t.Fatal("the fast path and the careful decoder load different trees")
		}
		if err == nil {
			// Whatever loads must be a usable tree.
			tr := &Tree{s: s}
			saveBytes(t, tr)
			tr.OfKind("replica")
			tr.Find("replica", "worker", Int(7))
			d, _ := Batch{Ops: []Op{{Type: OpCreate, Path: "/fuzz", Kind: "k"}, {Type: OpDelete, Path: "/db1", Recursive: true}}}.Encode()
			tr.Apply(s.index+1, d)
		}
	})
}

// wideTree is a tree whose records take the loader's careful path as well
// as its fast one: more than 128 kinds and keys (refs and keys of two
// bytes), indexes on such a kind and key, long and non-ASCII names, values
// of every type and size, siblings created out of name order, and nodes
// moved under parents created after them (parent ids above their own).
func wideTree(t testing.TB) *Tree {
	tr := New()
	ops := []Op{
		{Type: OpCreateIndex, Kind: "k139", Attr: "a139"},
		{Type: OpCreateIndex, Kind: "replica", Attr: "worker"},
		{Type: OpCreate, Path: "/rev", Kind: "dir"},
		{Type: OpCreate, Path: "/a", Kind: "dir"},
		{Type: OpCreate, Path: "/a/x", Kind: "dir"},
		{Type: OpCreate, Path: "/a/x/r0", Kind: "replica", Set: map[string]Value{"worker": Int(3)}},
	}
	for i := 0; i < 140; i++ {
		attrs := map[string]Value{}
		for j := 0; j <= i; j += 7 {
			attrs[fmt.Sprintf("a%03d", j)] = Int(int64(j))
		}
		attrs["a139"] = Int(int64(i % 3))
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/rev/n%03d", 139-i), Kind: fmt.Sprintf("k%03d", i), Set: attrs})
	}
	wide := map[string]Value{}
	for j := 0; j < 140; j++ {
		switch j % 4 {
		case 0:
			wide[fmt.Sprintf("a%03d", j)] = String(strings.Repeat("v", j*3))
		case 1:
			wide[fmt.Sprintf("a%03d", j)] = Int(math.MinInt64 + int64(j))
		case 2:
			wide[fmt.Sprintf("a%03d", j)] = Bool(j%8 == 2)
		case 3:
			wide[fmt.Sprintf("a%03d", j)] = Bytes(bytes.Repeat([]byte{byte(j)}, j))
		}
	}
	ops = append(ops,
		Op{Type: OpCreate, Path: "/wide", Kind: "k139", Set: wide},
		Op{Type: OpCreate, Path: "/" + strings.Repeat("long", 50), Kind: "dir", Set: map[string]Value{"s": String(strings.Repeat("x", 300)), "i": Int(math.MaxInt64)}},
		Op{Type: OpCreate, Path: "/ünïcødé", Kind: "dir"},
		Op{Type: OpCreate, Path: "/b", Kind: "dir"},
		Op{Type: OpCreate, Path: "/b/r1", Kind: "replica", Set: map[string]Value{"worker": Int(3)}},
	)
	mustApply(t, tr, 5, Batch{Ops: ops})
	mustApply(t, tr, 6, Batch{Ops: []Op{
		{Type: OpMove, Path: "/a/x", To: "/b/x"},  // x is older than b
		{Type: OpCreate, Path: "/c", Kind: "dir"}, // and b older than c
		{Type: OpMove, Path: "/b", To: "/c/b"},
		{Type: OpCreate, Path: "/b", Kind: "dir"},
		{Type: OpMove, Path: "/rev/n005", To: "/b/n005"},
	}})
	return tr
}

// loadBothWays loads img with the fast path and with the careful decoder
// alone, runs check on each tree, and checks that each saves img again.
func loadBothWays(t *testing.T, img []byte, check func(careful bool, c *Tree)) {
	t.Helper()
	for _, careful := range []bool{false, true} {
		s, err := readImageWith(bytes.NewReader(img), true, careful)
		if err != nil {
			t.Fatalf("careful=%v: %v", careful, err)
		}
		c := &Tree{s: s}
		check(careful, c)
		if !bytes.Equal(saveBytes(t, c), img) {
			t.Fatalf("careful=%v: save after load differs", careful)
		}
	}
}

// dumpAll renders every node of a tree, in path order, and its index
// lookups.
func dumpAll(tr *Tree) string {
	var b strings.Builder
	walkTree(tr, func(n Node) { fmt.Fprintf(&b, "%+v\n", n) })
	for _, v := range []Value{Int(0), Int(1), Int(2), Int(3)} {
		fmt.Fprintf(&b, "k139/a139=%v: %d, replica/worker=%v: %d\n", v, len(tr.Find("k139", "a139", v)), v, len(tr.Find("replica", "worker", v)))
	}
	return b.String()
}

// TestLoadUncommonShapes: a tree of every record shape loads to the same
// content and saves to the same bytes, whether records are decoded by the
// fast path or all by the careful decoder.
func TestLoadUncommonShapes(t *testing.T) {
	tr := wideTree(t)
	img := saveBytes(t, tr)
	want := dumpAll(tr)
	loadBothWays(t, img, func(careful bool, c *Tree) {
		if got := dumpAll(c); got != want {
			t.Fatalf("careful=%v: loaded tree differs:\n%s\nwant:\n%s", careful, got, want)
		}
	})
	x, _ := tr.Get("/c/b/x")
	if b, _ := tr.Get("/c/b"); x.ID >= b.ID {
		t.Fatalf("the fixture has no node older than its parent: %+v under %+v", x, b)
	}
}

// imgRec is a record of a hand-made image (no attributes).
type imgRec struct {
	id, parent uint64
	name, kind string
}

// handImage encodes an image of the records as given, for content that
// Save never writes.
func handImage(recs []imgRec) []byte { return handImageNext(recs, 0) }

// handImageNext is handImage with the header's next id (0: one above the
// largest id the records name).
func handImageNext(recs []imgRec, nextID uint64) []byte {
	var out bytes.Buffer
	out.WriteString(imagefmt.Magic)
	out.WriteByte(imagefmt.V1)
	bw := imagefmt.NewBlockWriter(&out)
	if nextID == 0 {
		for _, r := range recs {
			nextID = max(nextID, r.id+1, r.parent+1)
		}
	}
	p := []byte{'H'}
	p = binary.AppendUvarint(p, 10) // index
	p = binary.AppendUvarint(p, nextID)
	p = binary.AppendUvarint(p, uint64(len(recs)))
	p = binary.AppendUvarint(p, 0) // no secondary indexes
	bw.Payload = p
	_ = bw.Flush()
	kinds := map[string]uint64{}
	p = []byte{'N'}
	var prev uint64
	for i, r := range recs {
		if i > 0 && i%1000 == 0 { // a block per 1000 records
			bw.Payload = p
			_ = bw.Flush()
			p = []byte{'N'}
		}
		p = binary.AppendUvarint(p, r.id-prev)
		prev = r.id
		p = binary.AppendUvarint(p, r.parent)
		p = codec.AppendStr(p, r.name)
		if ref, ok := kinds[r.kind]; ok {
			p = binary.AppendUvarint(p, ref)
		} else {
			kinds[r.kind] = uint64(len(kinds))
			p = binary.AppendUvarint(p, uint64(len(kinds)-1))
			p = codec.AppendStr(p, r.kind)
		}
		p = append(p, 1, 0, 0) // created 1, not modified since, no attributes
	}
	bw.Payload = p
	_ = bw.Flush()
	p = []byte{'E'}
	p = binary.AppendUvarint(p, uint64(len(recs)))
	p = binary.AppendUvarint(p, uint64(bw.Blocks))
	bw.Payload = p
	_ = bw.Flush()
	return out.Bytes()
}

// TestLoadChecksLinks: Load links children to parents that come later in
// the image, sorts siblings that are out of name order, and rejects missing
// parents, parent cycles and duplicate sibling names, on either path.
func TestLoadChecksLinks(t *testing.T) {
	root := imgRec{id: 1}
	tests := []struct {
		name string
		recs []imgRec
		err  string // "" if the image is valid
	}{
		{"later parent and unsorted siblings", []imgRec{root, {2, 1, "b", "d"}, {3, 5, "x", "d"}, {4, 1, "a", "d"}, {5, 4, "y", "d"}, {6, 5, "w", "d"}}, ""},
		{"missing earlier parent", []imgRec{root, {3, 2, "a", "d"}}, "parent 2 does not exist"},
		{"missing later parent", []imgRec{root, {2, 5, "a", "d"}, {3, 1, "b", "d"}}, "parent 5 does not exist"},
		{"own parent", []imgRec{root, {2, 2, "a", "d"}}, "parent cycle"},
		{"cycle", []imgRec{root, {2, 3, "a", "d"}, {3, 2, "b", "d"}, {4, 1, "c", "d"}}, "parent cycle"},
		{"same name in order", []imgRec{root, {2, 1, "a", "d"}, {3, 1, "a", "d"}}, `named "a"`},
		{"same name out of order", []imgRec{root, {2, 1, "b", "d"}, {3, 1, "a", "d"}, {4, 1, "b", "d"}}, `named "b"`},
		{"same name, one parent later", []imgRec{root, {2, 4, "x", "d"}, {3, 1, "a", "d"}, {4, 1, "b", "d"}, {5, 4, "x", "d"}}, `named "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := handImage(tt.recs)
			for _, careful := range []bool{false, true} {
				s, err := readImageWith(bytes.NewReader(img), true, careful)
				if tt.err != "" {
					if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.err) {
						t.Fatalf("careful=%v: error %v, want ErrCorrupt with %q", careful, err, tt.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("careful=%v: %v", careful, err)
				}
				c := &Tree{s: s}
				if got := fmt.Sprint(c.Children("/"), c.Children("/a"), c.Children("/a/y")); got != "[a b] [y] [w x]" {
					t.Fatalf("careful=%v: children %s", careful, got)
				}
				if !bytes.Equal(saveBytes(t, c), img) {
					t.Fatalf("careful=%v: save differs from the image", careful)
				}
			}
		})
	}
}

// TestLoadManyBlocks loads an image of many blocks, so that decoding and
// linking overlap (run it with -race): the slab, the arena and the kind
// table all grow mid-load, kinds and keys are first used late, and nodes
// hang from parents created after them.
func TestLoadManyBlocks(t *testing.T) {
	tr := New()
	index := uint64(1)
	apply := func(ops []Op) {
		mustApply(t, tr, index, Batch{Ops: ops})
		index++
	}
	apply([]Op{{Type: OpCreateIndex, Kind: "replica", Attr: "worker"}, {Type: OpCreateIndex, Kind: "late", Attr: "zone"}})
	pad := strings.Repeat("p", 60)
	for d := 0; d < 20; d++ {
		ops := []Op{{Type: OpCreate, Path: fmt.Sprintf("/d%02d", d), Kind: "dir"}}
		for i := 0; i < 1000; i++ {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d%02d/r%d", d, i), Kind: "replica",
				Set: map[string]Value{"pad": String(pad), "worker": Int(int64(i % 7))}})
		}
		apply(ops)
	}
	var ops []Op
	for i := 0; i < 300; i++ {
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/l%03d", i), Kind: "late", Set: map[string]Value{"zone": String(fmt.Sprint("z", i%3))}})
	}
	apply(ops)
	ops = nil
	for d := 0; d < 20; d += 3 {
		ops = append(ops, Op{Type: OpMove, Path: fmt.Sprintf("/d%02d", d), To: fmt.Sprintf("/l%03d/d", d)})
	}
	apply(ops)
	img := saveBytes(t, tr)
	if len(img) < 8*imagefmt.BlockBytes {
		t.Fatalf("image of %d bytes: too few blocks for the test", len(img))
	}
	want := dumpAll(tr)
	loadBothWays(t, img, func(careful bool, c *Tree) {
		if got := dumpAll(c); got != want {
			t.Fatalf("careful=%v: loaded tree differs", careful)
		}
		if got := len(c.Find("late", "zone", String("z1"))); got != 100 {
			t.Fatalf("careful=%v: index on a kind first used late finds %d nodes, want 100", careful, got)
		}
	})
}

// TestLoadLinkerErrors: an error the linker finds (a missing parent) names
// the block it is in, and wins over a later error of the decoder.
func TestLoadLinkerErrors(t *testing.T) {
	recs := []imgRec{{id: 1}}
	for id := uint64(2); id <= 5000; id++ {
		if id == 4000 {
			continue // a hole
		}
		parent := uint64(1)
		if id == 4500 {
			parent = 4000
		}
		recs = append(recs, imgRec{id, parent, fmt.Sprint("n", id), "d"})
	}
	img := handImage(recs)
	const want = "block 6 (byte" // the fifth block of records
	for _, careful := range []bool{false, true} {
		for _, b := range [][]byte{img, img[:len(img)-3]} { // whole, and without the end block
			_, err := readImageWith(bytes.NewReader(b), true, careful)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "node 4500: parent 4000 does not exist") || !strings.Contains(err.Error(), want) {
				t.Fatalf("careful=%v, %d bytes: error %v, want the missing parent in %s", careful, len(b), err, want)
			}
		}
	}
}

// TestLoadRejectsOverlongVarints: an attribute value is kept, and indexed,
// in its encoded form, so Load accepts only the shortest encoding of an
// int (as DecodeBatch does): Int(-64) as 0xff 0x00 instead of 0x7f is
// corrupt on either path.
func TestLoadRejectsOverlongVarints(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/a", Kind: "k", Set: map[string]Value{"x": Int(-64)}}}})
	img := saveBytes(t, tr)

	// Rewrite the records block with the value's overlong form, checksums
	// recomputed.
	var out bytes.Buffer
	out.Write(img[:len(imagefmt.Magic)+1])
	br := imagefmt.NewBlockReader(bytes.NewReader(img[len(imagefmt.Magic)+1:]), false)
	bw := imagefmt.NewBlockWriter(&out)
	short, long := []byte{byte(TypeInt), 0x7f}, []byte{byte(TypeInt), 0xff, 0x00}
	rewritten := 0
	for {
		p, err := br.Next()
		if err != nil {
			t.Fatal(err)
		}
		p = bytes.Clone(p)
		if p[0] == 'N' {
			if bytes.Count(p, short) != 1 {
				t.Fatalf("the value's bytes are not unique in the block % x", p)
			}
			p = bytes.Replace(p, short, long, 1)
			rewritten++
		}
		bw.Payload = append(bw.Payload[:0], p...)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if p[0] == 'E' {
			break
		}
	}
	if rewritten != 1 {
		t.Fatalf("rewrote %d record blocks, want 1", rewritten)
	}
	for _, careful := range []bool{false, true} {
		_, err := readImageWith(bytes.NewReader(out.Bytes()), true, careful)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "overlong") {
			t.Fatalf("careful=%v: error %v, want ErrCorrupt naming the overlong varint", careful, err)
		}
	}
}

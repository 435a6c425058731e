package catalog

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
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
		if pos == len(imageMagic) {
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
	f.Add([]byte(imageMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := New()
		if err := tr.Load(bytes.NewReader(data)); err == nil {
			out := saveBytes(t, tr)
			if !bytes.Equal(out, data[:len(out)]) {
				t.Fatal("a loaded image saves differently")
			}
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("unexpected error: %v", err)
		}
		s, err := readImage(bytes.NewReader(data), false)
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

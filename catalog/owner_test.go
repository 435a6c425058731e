package catalog

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/metatree/metatree/catalog/internal/imagefmt"
)

// ownedTree holds /m (the owner, last changed at index 1), /jobs, and
// /jobs/a (with a child) and /jobs/b owned by /m's version 1, /jobs/b
// asking to be orphaned rather than deleted; /free is unowned.
func ownedTree(t *testing.T) *Tree {
	t.Helper()
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/m", Kind: "member", Set: map[string]Value{"gen": Int(1)}},
		{Type: OpCreate, Path: "/jobs", Kind: "dir"},
	}})
	mustApply(t, tr, 2, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/jobs/a", Kind: "job", Owner: Owner{Path: "/m", Version: 1}},
		{Type: OpCreate, Path: "/jobs/a/part", Kind: "part"},
		{Type: OpCreate, Path: "/jobs/b", Kind: "job", Owner: Owner{Path: "/m", Version: 1, Orphan: true}},
		{Type: OpCreate, Path: "/free", Kind: "job"},
	}})
	checkDigest(t, tr)
	return tr
}

// checkDigest fails unless the incremental digest equals a recompute.
func checkDigest(t *testing.T, tr *Tree) {
	t.Helper()
	f := tr.s.digestFormat
	if got, want := tr.s.digest, tr.s.computeDigest(f); got != want {
		t.Fatalf("incremental digest %v, recomputed %v", got.bytes(f), want.bytes(f))
	}
}

func mustExist(t *testing.T, tr *Tree, path string, want bool) {
	t.Helper()
	if _, ok := tr.Get(path); ok != want {
		t.Fatalf("%s exists: %v, want %v", path, ok, want)
	}
}

func TestOwnedNodesGoInTheApplyThatUpdatesTheOwner(t *testing.T) {
	tr := ownedTree(t)
	w := tr.Watch(WatchOptions{Prefix: "/"})
	defer w.Close()
	mustApply(t, tr, 3, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}}}})
	mustExist(t, tr, "/jobs/a", false)
	mustExist(t, tr, "/jobs/a/part", false)
	mustExist(t, tr, "/free", true)
	b, ok := tr.Get("/jobs/b")
	if !ok {
		t.Fatal("the orphan-marked node is gone")
	}
	if b.Attrs[OrphanedAttr] != String("3 "+OrphanOwnerChanged) || b.Modified != 3 {
		t.Fatalf("orphan marks: %v (modified %d)", b.Attrs, b.Modified)
	}
	if n := tr.ownedCount(); n != 0 {
		t.Fatalf("%d nodes still owned", n)
	}
	checkDigest(t, tr)
	// Watchers see ordinary events, all at the owner's index.
	var got []string
	for len(got) < 4 {
		ev, err := w.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Index != 3 {
			t.Fatalf("event %v at index %d, want 3", ev.Op, ev.Index)
		}
		n := ev.After
		if n == nil {
			n = ev.Before
		}
		got = append(got, ev.Op.String()+" "+n.Path)
	}
	// The owned nodes go newest first: /jobs/b, then /jobs/a's subtree.
	want := []string{"update /m", "update /jobs/b", "delete /jobs/a/part", "delete /jobs/a"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
}

func TestOwnedNodesGoWhenTheOwnerIsDeletedOrMoved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     Op
		reason string
	}{
		{"delete", Op{Type: OpDelete, Path: "/m"}, OrphanOwnerDeleted},
		{"move", Op{Type: OpMove, Path: "/m", To: "/m2"}, OrphanOwnerChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := ownedTree(t)
			mustApply(t, tr, 3, Batch{Ops: []Op{tc.op}})
			mustExist(t, tr, "/jobs/a", false)
			b, _ := tr.Get("/jobs/b")
			index, reason, err := ParseOrphanMark(b.Attrs[OrphanedAttr].Str())
			if err != nil || index != 3 || reason != tc.reason {
				t.Fatalf("mark %v: index %d, reason %q, %v; want 3, %q", b.Attrs[OrphanedAttr], index, reason, err, tc.reason)
			}
			checkDigest(t, tr)
		})
	}
}

func TestOwnedNodeMayGoOnItsOwnAndItsOwnerThenChangesFreely(t *testing.T) {
	tr := ownedTree(t)
	mustApply(t, tr, 3, Batch{Ops: []Op{{Type: OpDelete, Path: "/jobs/a", Recursive: true}, {Type: OpDelete, Path: "/jobs/b"}}})
	if n := tr.ownedCount(); n != 0 {
		t.Fatalf("%d nodes still owned", n)
	}
	mustApply(t, tr, 4, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}}}})
	mustExist(t, tr, "/free", true)
	checkDigest(t, tr)
}

func TestOwnershipCascadesThroughOwnedOwners(t *testing.T) {
	tr := ownedTree(t)
	// /jobs/b (orphan-marked when /m changes) owns /jobs/c: the mark is a
	// change of /jobs/b, which ends its version too.
	b, _ := tr.Get("/jobs/b")
	mustApply(t, tr, 3, Batch{Ops: []Op{{Type: OpCreate, Path: "/jobs/c", Kind: "job", Owner: Owner{Path: "/jobs/b", Version: b.Modified}}}})
	mustApply(t, tr, 4, Batch{Ops: []Op{{Type: OpDelete, Path: "/m"}}})
	mustExist(t, tr, "/jobs/b", true)
	mustExist(t, tr, "/jobs/c", false)
	checkDigest(t, tr)
}

func TestCreateOwnedByAnEndedOrMissingOwnerIsRefused(t *testing.T) {
	tr := ownedTree(t)
	mustApply(t, tr, 3, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}}}})
	for _, o := range []Owner{{Path: "/m", Version: 1}, {Path: "/m", Version: 4}, {Path: "/nobody", Version: 1}} {
		res := tr.Apply(tr.Index()+1, encode(t, Op{Type: OpCreate, Path: "/jobs/x", Kind: "job", Owner: o})).(*Result)
		if !errors.Is(res.Err, ErrConflict) {
			t.Fatalf("owner %+v: %v, want ErrConflict", o, res.Err)
		}
	}
	mustApply(t, tr, tr.Index()+1, Batch{Ops: []Op{{Type: OpCreate, Path: "/jobs/x", Kind: "job", Owner: Owner{Path: "/m", Version: 3}}}})
	if o, ok := tr.Owned("/jobs/x"); !ok || o != (Owner{Path: "/m", Version: 3}) {
		t.Fatalf("Owned: %+v %v", o, ok)
	}
}

func TestOwnerIsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   Op
	}{
		{"not a create", Op{Type: OpUpdate, Path: "/a", Owner: Owner{Path: "/m", Version: 1}}},
		{"root", Op{Type: OpCreate, Path: "/a", Kind: "k", Owner: Owner{Path: "/", Version: 1}}},
		{"itself", Op{Type: OpCreate, Path: "/a", Kind: "k", Owner: Owner{Path: "/a", Version: 1}}},
		{"below itself", Op{Type: OpCreate, Path: "/a", Kind: "k", Owner: Owner{Path: "/a/b", Version: 1}}},
		{"bad path", Op{Type: OpCreate, Path: "/a", Kind: "k", Owner: Owner{Path: "m", Version: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := (Batch{Ops: []Op{tc.op}}).Encode(); err == nil {
				t.Fatal("encoded")
			}
		})
	}
}

func TestFailedBatchLeavesOwnershipUntouched(t *testing.T) {
	tr := ownedTree(t)
	before, digest := dump(tr), tr.s.digest
	res := tr.Apply(3, encode(t,
		Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}},
		Op{Type: OpCreate, Path: "/jobs/d", Kind: "job", Owner: Owner{Path: "/m", Version: 3}},
		Op{Type: OpCreate, Path: "/missing/x", Kind: "job"},
	)).(*Result)
	if !errors.Is(res.Err, ErrNotFound) {
		t.Fatalf("batch: %v, want ErrNotFound", res.Err)
	}
	if after := dump(tr); after != before || tr.s.digest != digest {
		t.Fatalf("the failed batch changed the tree:\n%s\nwant\n%s", after, before)
	}
	if n := tr.ownedCount(); n != 2 {
		t.Fatalf("%d owned, want 2", n)
	}
	checkDigest(t, tr)
	mustApply(t, tr, 4, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}}}})
	mustExist(t, tr, "/jobs/a", false)
	checkDigest(t, tr)
}

func TestOwnedNodesDigestDifferently(t *testing.T) {
	owned := ownedTree(t)
	plain := New()
	mustApply(t, plain, 1, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/m", Kind: "member", Set: map[string]Value{"gen": Int(1)}},
		{Type: OpCreate, Path: "/jobs", Kind: "dir"},
	}})
	mustApply(t, plain, 2, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/jobs/a", Kind: "job"},
		{Type: OpCreate, Path: "/jobs/a/part", Kind: "part"},
		{Type: OpCreate, Path: "/jobs/b", Kind: "job"},
		{Type: OpCreate, Path: "/free", Kind: "job"},
	}})
	if dump(owned) != dump(plain) {
		t.Fatal("the trees differ in more than ownership")
	}
	if _, a := owned.Digest(); true {
		if _, b := plain.Digest(); a == b {
			t.Fatal("owned and unowned nodes digest alike")
		}
	}
}

func TestOwnerNeedsBatchVersion3(t *testing.T) {
	b := Batch{Ops: []Op{{Type: OpCreate, Path: "/jobs/x", Kind: "job", Owner: Owner{Path: "/m", Version: 1, Orphan: true}}}}
	if _, err := b.EncodeVersion(BatchV2); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("EncodeVersion(2): %v, want ErrUnsupportedVersion", err)
	}
	data, err := b.Encode()
	if err != nil || data[0] != BatchV3 {
		t.Fatalf("Encode: version %d, %v", data[0], err)
	}
	got, err := DecodeBatch(data)
	if err != nil || got.Ops[0].Owner != b.Ops[0].Owner {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	again, _ := got.Encode()
	if !bytes.Equal(again, data) {
		t.Fatal("re-encoding differs")
	}
	old := New()
	old.LimitFormat(BatchV2)
	if res := old.Apply(1, data).(*Result); res.Halt() == nil {
		t.Fatalf("a version 2 tree applied a version 3 batch: %v", res.Err)
	}
	// A batch without owners keeps its older encoding.
	plain, _ := Batch{Ops: []Op{{Type: OpCreate, Path: "/a", Kind: "k"}}}.Encode()
	if plain[0] != BatchV1 {
		t.Fatalf("a plain batch encodes as version %d", plain[0])
	}
}

func TestOwnedReplayEqualsLive(t *testing.T) {
	// Two trees apply the same entries, one of them with a watcher (whose
	// event bookkeeping must not change the outcome).
	var entries [][]byte
	entries = append(entries,
		encode(t, Op{Type: OpCreate, Path: "/m", Kind: "member"}, Op{Type: OpCreate, Path: "/n", Kind: "member"}),
		encode(t, Op{Type: OpCreate, Path: "/x", Kind: "job", Owner: Owner{Path: "/m", Version: 1}},
			Op{Type: OpCreate, Path: "/y", Kind: "job", Owner: Owner{Path: "/n", Version: 1, Orphan: true}},
			Op{Type: OpCreate, Path: "/z", Kind: "job", Owner: Owner{Path: "/m", Version: 1, Orphan: true}}),
		encode(t, Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"e": Int(2)}}),
		encode(t, Op{Type: OpCreate, Path: "/x", Kind: "job", Owner: Owner{Path: "/m", Version: 3}}),
		encode(t, Op{Type: OpDelete, Path: "/n"}),
	)
	a, b := New(), New()
	w := b.Watch(WatchOptions{Prefix: "/"})
	defer w.Close()
	for i, e := range entries {
		for _, tr := range []*Tree{a, b} {
			if res := tr.Apply(uint64(i+1), e).(*Result); res.Err != nil {
				t.Fatalf("entry %d: %v", i+1, res.Err)
			}
		}
	}
	if dump(a) != dump(b) || a.s.digest != b.s.digest {
		t.Fatalf("replicas differ:\n%s\n%s", dump(a), dump(b))
	}
	checkDigest(t, a)
	if n := a.ownedCount(); n != 1 {
		t.Fatalf("%d owned, want 1 (/x of /m's version 3)", n)
	}
}

// ownedImageTree is ownedTree for image tests, which have no *testing.T.
func ownedImageTree(t testing.TB) *Tree {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/m", Kind: "member"},
		{Type: OpCreate, Path: "/jobs", Kind: "dir"},
	}})
	mustApply(t, tr, 2, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/jobs/a", Kind: "job", Owner: Owner{Path: "/m", Version: 1}},
		{Type: OpCreate, Path: "/jobs/a/part", Kind: "part"},
		{Type: OpCreate, Path: "/jobs/b", Kind: "job", Owner: Owner{Path: "/m", Version: 1, Orphan: true}},
	}})
	return tr
}

func TestImageKeepsOwnershipAndTheCascadeWorksAfterLoad(t *testing.T) {
	src := ownedTree(t)
	img := saveBytes(t, src)
	if img[len(imagefmt.Magic)] != imagefmt.Version {
		t.Fatalf("image version %d, want %d", img[len(imagefmt.Magic)], imagefmt.Version)
	}
	dst := New()
	if err := dst.Load(bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	if dump(dst) != dump(src) || dst.s.digest != src.s.digest {
		t.Fatal("the loaded tree differs")
	}
	if !bytes.Equal(saveBytes(t, dst), img) {
		t.Fatal("the loaded tree saves differently")
	}
	// The transition the image predates ends the ownership on the loaded
	// tree as on the one that kept applying.
	next := encode(t, Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}})
	for _, tr := range []*Tree{src, dst} {
		if res := tr.Apply(3, next).(*Result); res.Err != nil {
			t.Fatal(res.Err)
		}
		mustExist(t, tr, "/jobs/a", false)
		checkDigest(t, tr)
	}
	if dump(dst) != dump(src) || dst.s.digest != src.s.digest {
		t.Fatal("the trees differ after the transition")
	}
	// Nothing owned: the body is version 1, as older code writes it.
	if v := saveBytes(t, dst)[len(imagefmt.Magic)]; v != imagefmt.V1 {
		t.Fatalf("an image without ownerships is version %d", v)
	}
}

func TestLoadRefusesOwnershipOfMissingNodes(t *testing.T) {
	img := saveBytes(t, ownedTree(t))
	// The last 'O' block names the owned ids 4 and 6 (of /jobs/a and
	// /jobs/b); rewrite its first owner id, 2 (/m), to 99.
	bad := bytes.Clone(img)
	i := bytes.LastIndex(bad, []byte{'O', 4, 2, 0})
	if i < 0 {
		t.Fatal("no ownership block found")
	}
	bad[i+2] = 99
	// readImage without verification: the checksum no longer matches.
	if _, err := readImage(bytes.NewReader(bad), false); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "owned by node 99") {
		t.Fatalf("load: %v", err)
	}
}

func TestOwnerWithoutAVersionTakesTheOwnersVersionWhenTheBatchApplies(t *testing.T) {
	tr := ownedTree(t)
	mustApply(t, tr, 3, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}}}})
	// Encoded before the owner changes again, applied after: the version
	// is the one the owner has at apply, not at encoding.
	data := encode(t, Op{Type: OpCreate, Path: "/jobs/x", Kind: "job", Owner: Owner{Path: "/m", Orphan: true}})
	mustApply(t, tr, 4, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(3)}}}})
	if res := tr.Apply(5, data).(*Result); res.Err != nil {
		t.Fatal(res.Err)
	}
	if o, ok := tr.Owned("/jobs/x"); !ok || o != (Owner{Path: "/m", Version: 4, Orphan: true}) {
		t.Fatalf("Owned: %+v %v, want /m at version 4", o, ok)
	}
	mustApply(t, tr, 6, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(4)}}}})
	x, _ := tr.Get("/jobs/x")
	if x.Attrs[OrphanedAttr] != String("6 "+OrphanOwnerChanged) {
		t.Fatalf("mark %v, want the index of the owner's next change", x.Attrs[OrphanedAttr])
	}
	checkDigest(t, tr)

	res := tr.Apply(7, encode(t, Op{Type: OpCreate, Path: "/jobs/y", Kind: "job", Owner: Owner{Path: "/nobody"}})).(*Result)
	if !errors.Is(res.Err, ErrConflict) {
		t.Fatalf("an owner that does not exist: %v, want ErrConflict", res.Err)
	}
}

func TestParseOrphanMarkReadsWhatTheCascadeWritesAndRefusesTheRest(t *testing.T) {
	index, reason, err := ParseOrphanMark(orphanMark(1<<63, OrphanOwnerDeleted).Str())
	if err != nil || index != 1<<63 || reason != OrphanOwnerDeleted {
		t.Fatalf("round trip: %d %q %v", index, reason, err)
	}
	for _, bad := range []string{"", "12", "12 ", " owner changed", "0 owner changed", "012 owner changed",
		"+12 owner changed", "-1 owner changed", "x owner changed", "18446744073709551616 owner changed"} {
		if _, _, err := ParseOrphanMark(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseOrphanMark(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzParseOrphanMark(f *testing.F) {
	f.Add("12 owner changed")
	f.Add("18446744073709551615 owner deleted")
	f.Add("0 x")
	f.Add("1")
	f.Fuzz(func(t *testing.T, mark string) {
		index, reason, err := ParseOrphanMark(mark)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v is not ErrInvalid", mark, err)
			}
			return
		}
		if got := orphanMark(index, reason).Str(); got != mark {
			t.Fatalf("%q parses to %d %q, which writes %q", mark, index, reason, got)
		}
	})
}

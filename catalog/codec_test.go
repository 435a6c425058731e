package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog/internal/codec"
)

func sampleBatch() Batch {
	return Batch{Ops: []Op{
		{Type: OpCreate, Path: "/db1", Kind: "database", Set: map[string]Value{"owner": String("ann"), "quota": Int(-5), "on": Bool(true), "blob": Bytes([]byte{0, 255})}, Cond: Cond{Absent: true}},
		{Type: OpUpdate, Path: "/db1", Set: map[string]Value{"quota": Int(1 << 40)}, Unset: []string{"on", "blob"}, Cond: Cond{Modified: 7}},
		{Type: OpMove, Path: "/db1", To: "/db2", Cond: Cond{Exists: true}},
		{Type: OpCheck, Path: "/db2"},
		{Type: OpDelete, Path: "/db2", Recursive: true},
		{Type: OpCreateIndex, Kind: "replica", Attr: "worker"},
		{Type: OpDropIndex, Kind: "replica", Attr: "worker"},
	}}
}

func TestBatchRoundTrip(t *testing.T) {
	b := sampleBatch()
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	again, err := got.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Fatal("re-encoding a decoded batch changed its bytes")
	}
	if len(got.Ops) != len(b.Ops) {
		t.Fatalf("%d ops, want %d", len(got.Ops), len(b.Ops))
	}
	for i := range b.Ops {
		w, g := b.Ops[i], got.Ops[i]
		if w.Type != g.Type || w.Path != g.Path || w.Kind != g.Kind || w.To != g.To || w.Attr != g.Attr ||
			w.Recursive != g.Recursive || w.Cond.Exists != g.Cond.Exists || w.Cond.Absent != g.Cond.Absent ||
			w.Cond.Modified != g.Cond.Modified || len(w.Cond.Match) != len(g.Cond.Match) || len(w.Set) != len(g.Set) {
			t.Fatalf("op %d: got %+v, want %+v", i, g, w)
		}
		for k, v := range w.Set {
			if !g.Set[k].Equal(v) {
				t.Fatalf("op %d: attribute %q = %v, want %v", i, k, g.Set[k], v)
			}
		}
		// Unset is encoded sorted.
		if strings.Join(g.Unset, ",") != map[int]string{1: "blob,on"}[i] {
			t.Fatalf("op %d: unset %q", i, g.Unset)
		}
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	cases := []struct {
		name string
		op   Op
		want error
	}{
		{"empty name", Op{Type: OpCreate, Path: "/a//b", Kind: "k"}, ErrInvalidName},
		{"slash", Op{Type: OpCheck, Path: "/a/"}, ErrInvalidName},
		{"relative", Op{Type: OpCheck, Path: "a"}, ErrInvalidName},
		{"long name", Op{Type: OpCreate, Path: "/" + long, Kind: "k"}, ErrInvalidName},
		{"dot", Op{Type: OpCreate, Path: "/a/..", Kind: "k"}, ErrInvalidName},
		{"control", Op{Type: OpCreate, Path: "/a\n", Kind: "k"}, ErrInvalidName},
		{"bad utf8", Op{Type: OpCreate, Path: "/\xc3", Kind: "k"}, ErrInvalidName},
		{"no kind", Op{Type: OpCreate, Path: "/a"}, ErrInvalidName},
		{"kind slash", Op{Type: OpCreate, Path: "/a", Kind: "a/b"}, ErrInvalidName},
		{"bad key", Op{Type: OpCreate, Path: "/a", Kind: "k", Set: map[string]Value{"": Int(1)}}, ErrInvalidName},
		{"zero value", Op{Type: OpCreate, Path: "/a", Kind: "k", Set: map[string]Value{"x": {}}}, ErrInvalid},
		{"huge value", Op{Type: OpCreate, Path: "/a", Kind: "k", Set: map[string]Value{"x": Bytes(make([]byte, MaxValueLen+1))}}, ErrInvalid},
		{"create root", Op{Type: OpCreate, Path: "/", Kind: "k"}, ErrExists},
		{"delete root", Op{Type: OpDelete, Path: "/"}, ErrInvalid},
		{"move root", Op{Type: OpMove, Path: "/", To: "/a"}, ErrInvalid},
		{"move into itself", Op{Type: OpMove, Path: "/a", To: "/a/b"}, ErrInvalid},
		{"move onto itself", Op{Type: OpMove, Path: "/a", To: "/a"}, ErrInvalid},
		{"move to root", Op{Type: OpMove, Path: "/a", To: "/"}, ErrInvalid},
		{"stray recursive", Op{Type: OpCreate, Path: "/a", Kind: "k", Recursive: true}, ErrInvalid},
		{"stray to", Op{Type: OpUpdate, Path: "/a", To: "/b"}, ErrInvalid},
		{"stray unset", Op{Type: OpCreate, Path: "/a", Kind: "k", Unset: []string{"x"}}, ErrInvalid},
		{"stray kind", Op{Type: OpDelete, Path: "/a", Kind: "k"}, ErrInvalid},
		{"set and unset", Op{Type: OpUpdate, Path: "/a", Set: map[string]Value{"x": Int(1)}, Unset: []string{"x"}}, ErrInvalid},
		{"exists and absent", Op{Type: OpCheck, Path: "/a", Cond: Cond{Exists: true, Absent: true}}, ErrInvalid},
		{"absent and modified", Op{Type: OpCheck, Path: "/a", Cond: Cond{Absent: true, Modified: 3}}, ErrInvalid},
		{"index with path", Op{Type: OpCreateIndex, Path: "/a", Kind: "k", Attr: "x"}, ErrInvalid},
		{"index without attr", Op{Type: OpCreateIndex, Kind: "k"}, ErrInvalidName},
		{"index with cond", Op{Type: OpDropIndex, Kind: "k", Attr: "x", Cond: Cond{Exists: true}}, ErrInvalid},
		{"unknown type", Op{Type: 99, Path: "/a"}, ErrInvalid},
		{"resync in a batch", Op{Type: OpResync, Path: "/a"}, ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := Batch{Ops: []Op{{Type: OpCheck, Path: "/"}, c.op}}
			_, err := b.Encode()
			var oe *OpError
			if !errors.Is(err, c.want) || !errors.As(err, &oe) || oe.Op != 1 {
				t.Fatalf("Encode error %v, want %v at op 1", err, c.want)
			}
		})
	}
	if _, err := (Batch{}).Encode(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	good, err := sampleBatch().Encode()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"version 0", append([]byte{0}, good[1:]...), ErrUnknownVersion},
		{"version newest+1", append([]byte{NewestBatchVersion + 1}, good[1:]...), ErrUnknownVersion},
		{"owner flag in version 2", func() []byte { b := append([]byte{}, good...); b[0] = BatchV2; b[3] |= flagOwner; return b }(), ErrMalformed},
		{"orphan flag without owner", func() []byte { b := append([]byte{}, good...); b[0] = BatchV3; b[3] |= flagOrphan; return b }(), ErrMalformed},
		{"version 255", append([]byte{255}, good[1:]...), ErrUnknownVersion},
		{"match flag in version 1", func() []byte { b := append([]byte{}, good...); b[3] |= flagMatch; return b }(), ErrMalformed},
		{"trailing byte", append(append([]byte{}, good...), 0), ErrMalformed},
		{"huge count", []byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 0}, ErrMalformed},
		{"zero ops", []byte{1, 0}, ErrMalformed},
		{"unknown flags", func() []byte { b := append([]byte{}, good...); b[3] |= 0x80; return b }(), ErrMalformed},
		{"bad varint", []byte{1, 1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ErrMalformed},
		// Found by FuzzDecodeBatch: an unset count of 0 as 0x80 0x00
		// decoded, and re-encoded as one byte. Values, lengths and counts
		// the same.
		{"overlong count", []byte("\x01\x01\x01\x00\x02/0\x010\x00\x00\x01\x010\x020\x80\x00"), ErrMalformed},
		{"overlong int value", []byte("\x01\x01\x01\x00\x02/0\x010\x00\x00\x01\x010\x02\x80\x00\x00"), ErrMalformed},
		{"overlong op count", []byte("\x01\x81\x00\x01\x00\x02/0\x010\x00\x00\x00\x00"), ErrMalformed},
	}
	for n := 1; n < len(good); n++ {
		cases = append(cases, struct {
			name string
			data []byte
			want error
		}{"truncated", good[:n], ErrMalformed})
	}
	for _, c := range cases {
		_, err := DecodeBatch(c.data)
		if !errors.Is(err, c.want) {
			t.Fatalf("%s (%d bytes): error %v, want %v", c.name, len(c.data), err, c.want)
		}
		// Apply must refuse it the same way and change nothing but the
		// index; an unknown version not even that: it halts.
		tr := New()
		res := tr.Apply(1, c.data).(*Result)
		wantIndex, halt := uint64(1), false
		if c.want == ErrUnknownVersion {
			wantIndex, halt = 0, true
		}
		if !errors.Is(res.Err, c.want) || tr.Len() != 1 || tr.Index() != wantIndex || (res.Halt() != nil) != halt {
			t.Fatalf("%s: Apply error %v (halt %v), %d nodes, index %d", c.name, res.Err, res.Halt(), tr.Len(), tr.Index())
		}
	}
}

// FuzzDecodeBatch: any bytes either decode to a batch that re-encodes to the
// same bytes, or fail with ErrMalformed/ErrUnknownVersion/an *OpError;
// never a panic. Apply on the same bytes agrees and never panics, and so
// does CheckProposal: what it passes never halts the tree that checked it.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := sampleBatch().Encode()
	f.Add(good)
	for _, b := range []Batch{
		{Ops: []Op{{Type: OpCreate, Path: "/a", Kind: "k", Set: map[string]Value{"x": Int(1)}}}},
		{Ops: []Op{{Type: OpUpdate, Path: "/a/b", Unset: []string{"x", "y"}}}},
		{Ops: []Op{{Type: OpUpdate, Path: "/a", Cond: Cond{Match: map[string]Value{"x": Int(1), "y": String("z")}}, Set: map[string]Value{"x": Int(2)}}}},
		{Ops: []Op{{Type: OpCreate, Path: "/a/o", Kind: "k", Owner: Owner{Path: "/a", Version: 1}}}},
		{Ops: []Op{{Type: OpCreate, Path: "/o", Kind: "k", Owner: Owner{Path: "/a", Version: 1, Orphan: true}}, {Type: OpUpdate, Path: "/a", Set: map[string]Value{"x": Int(2)}}}},
		{Ops: []Op{{Type: OpCheck, Path: "/a", Cond: Cond{Match: map[string]Value{"status": String("alive")}}}, {Type: OpCreate, Path: "/o", Kind: "k", Owner: Owner{Path: "/a", Orphan: true}}}},
	} {
		d, _ := b.Encode()
		f.Add(d)
		d, _ = b.EncodeVersion(BatchV2)
		f.Add(d)
		d, _ = b.EncodeVersion(BatchV3)
		f.Add(d)
	}
	f.Add([]byte{3, 1, 5, 0, 2, '/', 'a', 0, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte("hello")) // a first program's raw proposal: version 104
	setup, err := Batch{Ops: []Op{{Type: OpCreate, Path: "/a", Kind: "k"}}}.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		tr := New()
		if res := tr.Apply(1, setup).(*Result); res.Err != nil {
			t.Fatal(res.Err)
		}
		res := tr.Apply(2, data).(*Result)
		// A tree limited to version 1 reads the same bytes as version 1
		// code does: a version-2 batch halts it, changing nothing.
		old := New()
		old.LimitFormat(BatchV1)
		old.Apply(1, setup)
		oldRes := old.Apply(2, data).(*Result)
		if len(data) > 0 && data[0] > BatchV1 && (oldRes.Halt() == nil || old.Index() != 1) {
			t.Fatalf("version %d batch applied by a version 1 tree: %v, index %d", data[0], oldRes.Err, old.Index())
		}
		if errors.Is(err, ErrUnknownVersion) != (res.Halt() != nil) {
			t.Fatalf("DecodeBatch error %v but Apply halt %v", err, res.Halt())
		}
		if cerr := tr.CheckProposal(data); (cerr == nil) != (err == nil) || (err != nil && cerr.Error() != err.Error()) {
			t.Fatalf("CheckProposal says %v, DecodeBatch %v", cerr, err)
		}
		if old.CheckProposal(data) == nil && oldRes.Halt() != nil {
			t.Fatalf("CheckProposal passed a batch that halts its tree: %v", oldRes.Halt())
		}
		if res.Halt() != nil && tr.Index() != 1 {
			t.Fatalf("a halted batch moved the index to %d", tr.Index())
		}
		if err != nil {
			var oe *OpError
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownVersion) && !errors.As(err, &oe) {
				t.Fatalf("unexpected error type: %v", err)
			}
			if res.Err == nil {
				t.Fatalf("DecodeBatch failed (%v) but Apply succeeded", err)
			}
			return
		}
		again, err := b.EncodeVersion(int(data[0]))
		if err != nil {
			t.Fatalf("decoded batch does not encode in its version %d: %v", data[0], err)
		}
		// Each op must also be valid on its own (validation of a batch
		// skips what earlier ops proved; that must not let anything in).
		for i, o := range b.Ops {
			if _, err := (Batch{Ops: []Op{o}}).Encode(); err != nil {
				t.Fatalf("op %d passed batch validation but alone: %v", i, err)
			}
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded batch re-encodes differently")
		}
	})
}

// A version 2 batch carries Cond.Match and round-trips; Encode writes
// version 1 while no operation needs more, EncodeVersion refuses a version
// that cannot carry the batch; a tree limited to version 1 halts on a
// version 2 batch without moving its index, and one that reads it applies
// the match: a mismatch is a replicated no-op (conflict), not a halt.
func TestBatchVersion2Match(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/job", Kind: "job", Set: map[string]Value{"state": String("running")}}}})
	plain := Batch{Ops: []Op{{Type: OpUpdate, Path: "/job", Set: map[string]Value{"n": Int(1)}}}}
	if b, err := plain.Encode(); err != nil || b[0] != BatchV1 {
		t.Fatalf("a batch without Match encodes as version %v, %v", b, err)
	}
	if b, err := plain.EncodeVersion(BatchV2); err != nil || b[0] != BatchV2 {
		t.Fatalf("EncodeVersion(2): %v, %v", b, err)
	}
	if _, err := plain.EncodeVersion(NewestBatchVersion + 1); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("EncodeVersion(%d): %v", NewestBatchVersion+1, err)
	}
	done := Batch{Ops: []Op{{Type: OpUpdate, Path: "/job", Cond: Cond{Match: map[string]Value{"state": String("running")}}, Set: map[string]Value{"state": String("done")}}}}
	if _, err := done.EncodeVersion(BatchV1); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("Match in version 1: %v", err)
	}
	data, err := done.Encode()
	if err != nil || data[0] != BatchV2 {
		t.Fatalf("a batch with Match encodes as %v, %v", data, err)
	}
	back, err := DecodeBatch(data)
	if err != nil || !back.Ops[0].Cond.Match["state"].Equal(String("running")) {
		t.Fatalf("decoded %+v, %v", back, err)
	}

	old := New()
	old.LimitFormat(BatchV1)
	mustApply(t, old, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/job", Kind: "job", Set: map[string]Value{"state": String("running")}}}})
	res := old.Apply(2, data).(*Result)
	if !errors.Is(res.Halt(), ErrUnknownVersion) || old.Index() != 1 || !strings.Contains(res.Err.Error(), "index 2") {
		t.Fatalf("version 1 tree on a version 2 batch: %v, halt %v, index %d", res.Err, res.Halt(), old.Index())
	}

	if res := tr.Apply(2, data).(*Result); res.Err != nil {
		t.Fatal(res.Err)
	}
	if n, _ := tr.Get("/job"); !n.Attrs["state"].Equal(String("done")) {
		t.Fatalf("state %v after the match", n.Attrs["state"])
	}
	res = tr.Apply(3, data).(*Result) // state is "done" now
	if !errors.Is(res.Err, ErrConflict) || res.Halt() != nil || tr.Index() != 3 {
		t.Fatalf("mismatch: %v, halt %v, index %d", res.Err, res.Halt(), tr.Index())
	}
	for _, bad := range []Op{
		{Type: OpCreate, Path: "/x", Kind: "k", Cond: Cond{Match: map[string]Value{"a": Int(1)}}},
		{Type: OpCheck, Path: "/x", Cond: Cond{Absent: true, Match: map[string]Value{"a": Int(1)}}},
		{Type: OpCheck, Path: "/x", Cond: Cond{Match: map[string]Value{"a/": Int(1)}}},
	} {
		if _, err := (Batch{Ops: []Op{bad}}).Encode(); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrInvalidName) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestValidationMemo: a bad path, kind or key right after a good one that
// shares its prefix is still rejected (validation skips what an earlier op
// of the batch proved valid).
func TestValidationMemo(t *testing.T) {
	prev := Op{Type: OpCreate, Path: "/a/bb/c", Kind: "kind", Set: map[string]Value{"key": Int(1)}}
	for _, bad := range []Op{
		{Type: OpCheck, Path: "/a/bb/c/"},
		{Type: OpCheck, Path: "/a/bb//c"},
		{Type: OpCheck, Path: "/a/bb/.."},
		{Type: OpCheck, Path: "/a/bb/c\x01"},
		{Type: OpCheck, Path: "/a/b\x01"},
		{Type: OpCheck, Path: "/a/bb/" + strings.Repeat("x", 256)},
		{Type: OpCheck, Path: "/a/bb/c/\xff"},
		{Type: OpCheck, Path: "a/bb"},
		{Type: OpCreate, Path: "/a/bb/d", Kind: "kind/"},
		{Type: OpCreate, Path: "/a/bb/d", Kind: "kind", Set: map[string]Value{"key/": Int(1)}},
	} {
		_, err := Batch{Ops: []Op{prev, bad}}.Encode()
		var oe *OpError
		if !errors.As(err, &oe) || oe.Op != 1 {
			t.Errorf("%+v after %+v: error %v", bad, prev, err)
		}
	}
	for _, good := range []string{"/a/bb/c", "/a/bb", "/a", "/a/bb/c/d", "/a/bx", "/b"} {
		if _, err := (Batch{Ops: []Op{prev, {Type: OpCheck, Path: good}}}).Encode(); err != nil {
			t.Errorf("%q after %q: %v", good, prev.Path, err)
		}
	}
}

// CheckProposal refuses, without applying anything, exactly what Apply
// could not read as a batch, naming what is wrong: raw bytes (version
// 104 for "hello"), a truncated batch, a version newer than the tree
// reads; a valid batch passes.
func TestCheckProposalRefusesWhatApplyCannotRead(t *testing.T) {
	tr := New()
	err := tr.CheckProposal([]byte("hello"))
	require.ErrorIs(t, err, ErrUnknownVersion)
	require.ErrorContains(t, err, fmt.Sprintf("batch version 104 (this code reads 1 to %d)", NewestBatchVersion))
	require.ErrorIs(t, tr.CheckProposal([]byte{BatchV1, 1, 1}), ErrMalformed)
	require.ErrorIs(t, tr.CheckProposal(nil), ErrMalformed)
	match, err := Batch{Ops: []Op{{Type: OpCheck, Path: "/a", Cond: Cond{Match: map[string]Value{"x": Int(1)}}}}}.EncodeVersion(BatchV2)
	require.NoError(t, err)
	require.NoError(t, tr.CheckProposal(match))
	old := New()
	old.LimitFormat(BatchV1)
	require.ErrorIs(t, old.CheckProposal(match), ErrUnknownVersion)
	require.Zero(t, tr.Index(), "checking applies nothing")
	require.Zero(t, old.Index(), "checking applies nothing")
}

// The value types are the type bytes of the encoding (internal/codec),
// which reads blobs by those numbers.
func TestValueTypesAreTheCodecTypeBytes(t *testing.T) {
	for _, c := range []struct {
		typ  ValueType
		byte int
	}{{TypeString, codec.TypeString}, {TypeInt, codec.TypeInt}, {TypeBool, codec.TypeBool}, {TypeBytes, codec.TypeBytes}} {
		if int(c.typ) != c.byte {
			t.Errorf("%s is %d, its type byte %d", c.typ, c.typ, c.byte)
		}
		if b := appendValue(nil, Value{typ: c.typ}); int(b[0]) != c.byte {
			t.Errorf("%s encodes with type byte %d, the codec reads %d", c.typ, b[0], c.byte)
		}
	}
}

package imagefmt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Blocks written by a BlockWriter read back whole, and a changed byte
// fails the checksum when the reader verifies.
func TestBlocksReadBackAndFailTheirChecksum(t *testing.T) {
	var out bytes.Buffer
	bw := NewBlockWriter(&out)
	payloads := [][]byte{[]byte("Hfirst"), bytes.Repeat([]byte("N"), 3*BlockBytes/2)}
	for _, p := range payloads {
		bw.Payload = append(bw.Payload, p...)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if bw.Blocks != len(payloads) {
		t.Fatalf("%d blocks written, want %d", bw.Blocks, len(payloads))
	}
	br := NewBlockReader(bytes.NewReader(out.Bytes()), true)
	for i, want := range payloads {
		got, err := br.Next()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("block %d: %d bytes, error %v; want %d bytes", i, len(got), err, len(want))
		}
	}
	if _, err := br.Next(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated in block length") {
		t.Fatalf("after the last block: %v, want ErrCorrupt (truncated)", err)
	}
	bad := bytes.Clone(out.Bytes())
	bad[3] ^= 1
	if _, err := NewBlockReader(bytes.NewReader(bad), true).Next(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("changed byte: %v, want ErrCorrupt (checksum)", err)
	}
	if _, err := NewBlockReader(bytes.NewReader(bad), false).Next(); err != nil {
		t.Fatalf("changed byte without verifying: %v", err)
	}
}

// NewDecoder refuses what is not a body: another magic, a version it does
// not read, a short head.
func TestDecoderRefusesTheHead(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       error
	}{
		{"magic", "NOTANIMG\x01", ErrCorrupt},
		{"version 0", Magic + "\x00", codec.ErrUnknownVersion},
		{"newer version", Magic + string([]byte{Version + 1}), codec.ErrUnknownVersion},
		{"short", Magic[:4], ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewDecoder(strings.NewReader(c.body), true, false); !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
}

// fakeTree numbers kinds and keys as they come and indexes key "x" of
// kind "k".
type fakeTree struct{ kinds, keys []string }

func intern(names *[]string, name string) uint32 {
	if i := slices.Index(*names, name); i >= 0 {
		return uint32(i)
	}
	*names = append(*names, name)
	return uint32(len(*names) - 1)
}

func (f *fakeTree) InternKind(name string) uint32 { return intern(&f.kinds, name) }
func (f *fakeTree) InternKey(name string) uint32  { return intern(&f.keys, name) }
func (f *fakeTree) Kinds() []string               { return f.kinds }
func (f *fakeTree) Keys() []string                { return f.keys }

func (f *fakeTree) IndexKeys(kind uint32) []uint32 {
	if int(kind) < len(f.kinds) && f.kinds[kind] == "k" {
		if i := slices.Index(f.keys, "x"); i >= 0 {
			return []uint32{uint32(i)}
		}
	}
	return nil
}

func (f *fakeTree) ValidName(name string) error {
	if name == "" || strings.Contains(name, "/") {
		return errors.New("catalog: invalid name")
	}
	return nil
}

// blob is a layout blob of a name and attributes (key numbers and encoded
// values).
func blob(name string, attrs ...any) []byte {
	b := codec.AppendStr(nil, name)
	b = binary.AppendUvarint(b, uint64(len(attrs)/2))
	for i := 0; i < len(attrs); i += 2 {
		b = binary.AppendUvarint(b, uint64(attrs[i].(int)))
		b = append(b, attrs[i+1].([]byte)...)
	}
	return b
}

// A body written with the encoders decodes back to the same records, on
// the fast path and the careful one, with the indexed value located or
// left for the tree to find, and the links of its 'O' block.
func TestDecoderReadsWhatTheEncodersWrite(t *testing.T) {
	kinds, keys := []string{"", "k"}, []string{"a", "x"}
	val := binary.AppendVarint([]byte{codec.TypeInt}, -3)
	str := codec.AppendStr([]byte{codec.TypeString}, "v")
	recs := []struct {
		r      layout.Rec
		parent uint64
		blob   []byte
	}{
		{layout.Rec{ID: 1}, 0, blob("")},
		{layout.Rec{ID: 2, Kind: 1, Created: 3, Modified: 4}, 1, blob("n", 0, str, 1, val)},
		{layout.Rec{ID: 5, Kind: 1, Created: 5, Modified: 5}, 2, blob("m", 1, val)},
	}
	var out bytes.Buffer
	if err := WriteHead(&out, Version); err != nil {
		t.Fatal(err)
	}
	bw := NewBlockWriter(&out)
	bw.Payload = AppendHeader(bw.Payload, Header{Index: 7, NextID: 6, Count: uint64(len(recs)), Defs: [][2]string{{"k", "x"}}})
	_ = bw.Flush()
	enc := NewRecordEncoder()
	bw.Payload = append(bw.Payload, BlockNodes)
	var prev uint64
	for _, r := range recs {
		bw.Payload = enc.Append(bw.Payload, &r.r, prev, r.parent, r.blob, kinds, keys)
		prev = r.r.ID
	}
	_ = bw.Flush()
	link := Link{Owned: 5, Owner: 2, Orphan: 1}
	bw.Payload = AppendLink(append(bw.Payload, BlockLinks), link, 0)
	_ = bw.Flush()
	bw.Payload = AppendEnd(bw.Payload, uint64(len(recs)), bw.Blocks)
	_ = bw.Flush()

	for _, careful := range []bool{false, true} {
		d, err := NewDecoder(bytes.NewReader(out.Bytes()), true, careful)
		if err != nil {
			t.Fatal(err)
		}
		if h := d.Header(); h.Index != 7 || h.NextID != 6 || h.Count != 3 || len(h.Defs) != 1 {
			t.Fatalf("header %+v", h)
		}
		tree := &fakeTree{kinds: []string{""}}
		st := layout.NewStore()
		d.Begin(tree, &st, 1<<10)
		// The header's index makes its names known before the records.
		tree.InternKind("k")
		tree.InternKey("x")
		p, done, err := d.Next()
		if err != nil || done {
			t.Fatalf("careful=%v: first block: done %v, %v", careful, done, err)
		}
		for i, off := 0, 0; off < len(p); i++ {
			next := d.FastRecord(p, off)
			if next == 0 {
				if next, err = d.Record(p, off); err != nil {
					t.Fatalf("careful=%v: record %d: %v", careful, i, err)
				}
			}
			off = next
			r, want := st.At(d.Slot), recs[i]
			gotBlob := st.Arena.Get(r.Blob, r.BLen)
			name, _ := layout.SplitBlob(gotBlob)
			wantName, _ := layout.SplitBlob(want.blob)
			if r.ID != want.r.ID || d.Parent != want.parent || tree.kinds[r.Kind] != kinds[want.r.Kind] ||
				r.Created != want.r.Created || r.Modified != want.r.Modified || !bytes.Equal(name, wantName) {
				t.Fatalf("careful=%v: record %d: %+v named %q, parent %d, want %+v named %q, parent %d", careful, i, *r, name, d.Parent, want.r, wantName, want.parent)
			}
			if i == 0 {
				continue
			}
			if len(d.Vals) != 1 {
				t.Fatalf("careful=%v: record %d: %d index values, want 1", careful, i, len(d.Vals))
			}
			if v := d.Vals[0]; v != FindValue && !bytes.Equal(gotBlob[v>>32:uint32(v)], val) {
				t.Fatalf("careful=%v: record %d: indexed value %x, want %x", careful, i, gotBlob[v>>32:uint32(v)], val)
			}
			// Record 1 defines its dictionary entries, which the fast path
			// leaves to the careful one; record 2 takes the fast path.
			if fast := !careful && i == 2; fast != (d.Vals[0] != FindValue) {
				t.Fatalf("careful=%v: record %d: the value located %v", careful, i, d.Vals[0] != FindValue)
			}
		}
		if _, done, err := d.Next(); err != nil || !done {
			t.Fatalf("careful=%v: end: done %v, %v", careful, done, err)
		}
		if !slices.Equal(d.Links, []Link{link}) {
			t.Fatalf("careful=%v: links %v, want %v", careful, d.Links, []Link{link})
		}
	}
}

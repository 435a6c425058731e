package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

func TestKVRoundTrip(t *testing.T) {
	k, v, err := decodeKV(encodeKV("k000000000001", []byte("value")))
	if err != nil || k != "k000000000001" || string(v) != "value" {
		t.Fatalf("decodeKV = %q, %q, %v", k, v, err)
	}
	for _, bad := range [][]byte{nil, {5, 'a'}, append(encodeKV("k", []byte("v")), 0)} {
		if _, _, err := decodeKV(bad); err == nil {
			t.Errorf("decodeKV(%x): no error", bad)
		}
	}
}

func TestSnapshotRestore(t *testing.T) {
	f := &mapFSM{m: map[string][]byte{"a": []byte("1"), "b": nil}}
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := &mapFSM{}
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.(mapSnapshot)))); err != nil {
		t.Fatal(err)
	}
	if len(g.m) != 2 || string(g.m["a"]) != "1" || !g.get("b") {
		t.Fatalf("restored %v", g.m)
	}
}

// FuzzDecode feeds arbitrary bytes to the command and snapshot decoders:
// they return an error or a key and value that survive an encode and a
// decode unchanged, and never panic.
func FuzzDecode(f *testing.F) {
	f.Add(encodeKV("k", []byte("v")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		if k, v, err := decodeKV(data); err == nil {
			k2, v2, err := decodeKV(encodeKV(k, v))
			if err != nil || k2 != k || !bytes.Equal(v2, v) {
				t.Fatalf("decodeKV(%x) = %q, %x; its encoding decodes to %q, %x, %v", data, k, v, k2, v2, err)
			}
		}
		fsm := &mapFSM{}
		_ = fsm.Restore(io.NopCloser(bytes.NewReader(data)))
		_ = fsm.Apply(&raft.Log{Data: data})
	})
}

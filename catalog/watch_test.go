package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// drain returns the events ready in w as "index op path" lines, and
// "closed" when it has ended.
func drain(w *Watcher) []string {
	var out []string
	for {
		ev, ok, err := w.TryNext()
		switch {
		case err != nil:
			return append(out, "closed")
		case ok:
			var path string
			switch {
			case ev.Op == OpMove:
				path = ev.Before.Path + "->" + ev.After.Path
			case ev.After != nil:
				path = ev.After.Path
			case ev.Before != nil:
				path = ev.Before.Path
			}
			out = append(out, fmt.Sprintf("%d %s %s", ev.Index, ev.Op, path))
		default:
			return out
		}
	}
}

// next returns w's next event, failing the test if none is ready.
func next(t testing.TB, w *Watcher) Event {
	t.Helper()
	ev, ok, err := w.TryNext()
	if !ok || err != nil {
		t.Fatalf("no event ready: %v", err)
	}
	return ev
}

func TestWatchFilters(t *testing.T) {
	tr := New()
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/a", Kind: "dir"}, Op{Type: OpCreate, Path: "/ab", Kind: "dir"}))
	all := tr.Watch(WatchOptions{})
	sub := tr.Watch(WatchOptions{Prefix: "/a"})
	deep := tr.Watch(WatchOptions{Prefix: "/a/x/y"})
	kind := tr.Watch(WatchOptions{Kind: "file"})
	subKind := tr.Watch(WatchOptions{Prefix: "/ab", Kind: "file"})
	if all.Start() != 1 {
		t.Fatalf("Start() = %d", all.Start())
	}

	tr.Apply(2, encode(t,
		Op{Type: OpCreate, Path: "/a/x", Kind: "dir"},
		Op{Type: OpCreate, Path: "/a/x/y", Kind: "file", Set: map[string]Value{"n": Int(1)}},
		Op{Type: OpCreate, Path: "/ab/f", Kind: "file"},
	))
	tr.Apply(3, encode(t, Op{Type: OpUpdate, Path: "/a/x/y", Set: map[string]Value{"n": Int(2)}}))
	// A failed batch produces no events.
	tr.Apply(4, encode(t, Op{Type: OpCreate, Path: "/a/z", Kind: "file"}, Op{Type: OpCheck, Path: "/missing"}))
	tr.Apply(5, encode(t, Op{Type: OpMove, Path: "/a/x", To: "/ab/x"}))
	tr.Apply(6, encode(t, Op{Type: OpDelete, Path: "/ab", Recursive: true}))

	want := map[*Watcher]string{
		all: "2 create /a/x|2 create /a/x/y|2 create /ab/f|3 update /a/x/y|5 move /a/x->/ab/x|" +
			"6 delete /ab/x/y|6 delete /ab/x|6 delete /ab/f|6 delete /ab",
		sub:     "2 create /a/x|2 create /a/x/y|3 update /a/x/y|5 move /a/x->/ab/x",
		deep:    "2 create /a/x/y|3 update /a/x/y|5 move /a/x->/ab/x",
		kind:    "2 create /a/x/y|2 create /ab/f|3 update /a/x/y|6 delete /ab/x/y|6 delete /ab/f",
		subKind: "2 create /ab/f|6 delete /ab/x/y|6 delete /ab/f",
	}
	for w, exp := range want {
		if got := strings.Join(drain(w), "|"); got != exp {
			t.Errorf("prefix %q kind %q:\n got %s\nwant %s", w.f.prefix, w.f.kind, got, exp)
		}
	}
}

func TestWatchEventNodes(t *testing.T) {
	tr := New()
	w := tr.Watch(WatchOptions{})
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/n", Kind: "k", Set: map[string]Value{"v": Int(1)}}))
	tr.Apply(2, encode(t, Op{Type: OpUpdate, Path: "/n", Set: map[string]Value{"v": Int(2)}}))
	next(t, w)
	ev := next(t, w)
	if ev.Index != 2 || ev.Op != OpUpdate || ev.Before.Attrs["v"].Int64() != 1 || ev.After.Attrs["v"].Int64() != 2 ||
		ev.Before.Modified != 1 || ev.After.Modified != 2 || ev.After.ID != 2 || ev.After.Parent != 1 {
		t.Fatalf("update event %+v / %+v", ev.Before, ev.After)
	}
}

func TestWatchOverflowAndLoad(t *testing.T) {
	tr := New()
	w := tr.Watch(WatchOptions{Buffer: 2})
	for i := 1; i <= 3; i++ {
		tr.Apply(uint64(i), encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "k"}))
	}
	if got := strings.Join(drain(w), "|"); got != "1 create /n1|2 create /n2|closed" {
		t.Fatalf("overflowed watcher got %s", got)
	}
	if !errors.Is(w.Err(), ErrResync) {
		t.Fatalf("Err() = %v", w.Err())
	}
	w.Close() // after being dropped: no panic

	img := saveBytes(t, tr)
	w2 := tr.Watch(WatchOptions{})
	if err := tr.Load(bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(drain(w2), "|"); got != "3 resync |closed" {
		t.Fatalf("watcher across Load got %s", got)
	}
	if !errors.Is(w2.Err(), ErrResync) {
		t.Fatalf("Err() after Load = %v", w2.Err())
	}
	// A failed Load leaves watchers alone.
	w3 := tr.Watch(WatchOptions{})
	if err := tr.Load(bytes.NewReader(img[:10])); err == nil {
		t.Fatal("truncated Load succeeded")
	}
	if w3.Err() != nil || len(drain(w3)) != 0 {
		t.Fatal("a failed Load disturbed a watcher")
	}
	w3.Close()
	if got := drain(w3); len(got) != 1 || got[0] != "closed" || w3.Err() != nil {
		t.Fatalf("after Close: %v, %v", got, w3.Err())
	}
}

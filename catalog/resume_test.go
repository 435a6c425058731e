package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// fakeLog is a retained log in memory: the batches from index first on,
// and images (saved trees) at some indexes.
type fakeLog struct {
	first   uint64 // the oldest index still held
	entries map[uint64][]byte
	images  map[uint64][]byte
}

func (l *fakeLog) history(t testing.TB) History {
	return History{
		Base: func(_ context.Context, at uint64) (*Tree, uint64, error) {
			var best uint64
			var img []byte
			for i, b := range l.images {
				if i <= at && i >= best {
					best, img = i, b
				}
			}
			tr := New()
			if img == nil {
				return tr, 0, nil
			}
			return tr, best, tr.Load(bytes.NewReader(img))
		},
		Entries: func(ctx context.Context, after, upTo uint64, fn func(uint64, []byte) error) error {
			if after+1 < l.first {
				return fmt.Errorf("entries after %d: the log starts at %d: %w", after, l.first, ErrCompacted)
			}
			for i := after + 1; i <= upTo; i++ {
				if err := ctx.Err(); err != nil {
					return err
				}
				if d, ok := l.entries[i]; ok {
					if err := fn(i, d); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
}

// eventLine renders an event with everything a consumer sees of it.
func eventLine(ev Event) string {
	var before, after string
	if ev.Before != nil {
		before = fmt.Sprintf("%s#%d%v@%d", ev.Before.Path, ev.Before.ID, ev.Before.Attrs, ev.Before.Modified)
	}
	if ev.After != nil {
		after = fmt.Sprintf("%s#%d%v@%d", ev.After.Path, ev.After.ID, ev.After.Attrs, ev.After.Modified)
	}
	return fmt.Sprintf("%d %s %s -> %s", ev.Index, ev.Op, before, after)
}

// randomBatches returns n batches of creates, updates, moves, recursive
// deletes and batches that fail their preconditions, under /w and /o.
func randomBatches(t testing.TB, n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var out [][]byte
	out = append(out, encode(t, Op{Type: OpCreate, Path: "/w", Kind: "dir"}, Op{Type: OpCreate, Path: "/o", Kind: "dir"}))
	for i := 1; i < n; i++ {
		d := fmt.Sprintf("/%s/d%d", []string{"w", "o"}[rng.IntN(2)], rng.IntN(4))
		var ops []Op
		switch rng.IntN(6) {
		case 0, 1:
			ops = []Op{
				{Type: OpCreate, Path: d, Kind: "dir", Cond: Cond{}},
				{Type: OpCreate, Path: fmt.Sprintf("%s/f%d", d, i), Kind: "file", Set: map[string]Value{"n": Int(int64(i))}},
			}
			if rng.IntN(2) == 0 {
				ops = ops[1:] // fails unless d exists
			}
		case 2:
			ops = []Op{{Type: OpUpdate, Path: d, Set: map[string]Value{"v": Int(int64(i))}}}
		case 3:
			ops = []Op{{Type: OpDelete, Path: d, Recursive: true}}
		case 4:
			to := fmt.Sprintf("/%s/d%d", []string{"w", "o"}[rng.IntN(2)], rng.IntN(4))
			if to == d {
				to += "x"
			}
			ops = []Op{{Type: OpMove, Path: d, To: to}}
		case 5:
			ops = []Op{{Type: OpCreate, Path: d + "/x", Kind: "file"}, {Type: OpCheck, Path: "/missing"}}
		}
		out = append(out, encode(t, ops...))
	}
	return out
}

// TestWatchFromReplaysThenLive resumes watches from every index of a log,
// from images at several points, while the applier goes on: each one gets
// exactly the events a watcher running all along got after that index, once
// each and in order.
func TestWatchFromReplaysThenLive(t *testing.T) {
	const n, live = 400, 150 // batches; the last `live` apply during the resume
	batches := randomBatches(t, n)
	log := &fakeLog{first: 1, entries: map[uint64][]byte{}, images: map[uint64][]byte{}}
	ref := New()
	all := ref.Watch(WatchOptions{Prefix: "/w", Buffer: 1 << 16})
	for i, b := range batches {
		idx := uint64(2*i + 1) // every other index is not a batch (a conf change, say)
		log.entries[idx] = b
		ref.Apply(idx, b)
		if i%25 == 0 {
			log.images[idx] = saveBytes(t, ref)
		}
	}
	var want []string
	for _, l := range drainAll(all) {
		want = append(want, eventLine(l))
	}
	if len(want) < 50 {
		t.Fatalf("only %d reference events", len(want))
	}
	lastIndex := uint64(2*len(batches) - 1)

	for _, from := range []uint64{0, 1, 2, 7, 50, 51, 99, 100, 101, lastIndex - 2*live - 1, lastIndex - 2*live + 1, lastIndex} {
		t.Run(fmt.Sprint("from=", from), func(t *testing.T) {
			tr := New()
			for i, b := range batches[:n-live] {
				tr.Apply(uint64(2*i+1), b)
			}
			// The applier runs on while the watch resumes.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := n - live; i < n; i++ {
					tr.Apply(uint64(2*i+1), batches[i])
				}
			}()
			var got []string
			w, err := tr.WatchFrom(t.Context(), from, WatchOptions{Prefix: "/w", Buffer: 1 << 16}, log.history(t),
				func(ev Event) error { got = append(got, eventLine(ev)); return nil })
			if err != nil {
				t.Fatal(err)
			}
			<-done
			for _, ev := range drainAll(w) {
				got = append(got, eventLine(ev))
			}
			w.Close()
			var exp []string
			for _, l := range want {
				var idx uint64
				fmt.Sscan(l, &idx)
				if idx > from {
					exp = append(exp, l)
				}
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("from %d (live start %d): got %d events, want %d\n got %q\nwant %q", from, w.Start(), len(got), len(exp), got, exp)
			}
		})
	}
}

// drainAll returns the events ready in w.
func drainAll(w *Watcher) []Event {
	var out []Event
	for {
		ev, ok, err := w.TryNext()
		if !ok || err != nil {
			return out
		}
		out = append(out, ev)
	}
}

func TestWatchFromCompacted(t *testing.T) {
	log := &fakeLog{first: 11, entries: map[uint64][]byte{}, images: map[uint64][]byte{}}
	tr := New()
	for i := uint64(1); i <= 20; i++ {
		b := encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "k"})
		tr.Apply(i, b)
		if i >= log.first {
			log.entries[i] = b
		}
		if i == 15 {
			log.images[i] = saveBytes(t, tr)
		}
	}
	for _, c := range []struct {
		from    uint64
		wantErr error
		events  int
	}{
		{from: 5, wantErr: ErrCompacted}, // older than the log
		{from: 9, wantErr: ErrCompacted},
		// The log holds 11 on, but no image is at or before 10: the state
		// at 10 cannot be rebuilt.
		{from: 10, wantErr: ErrCompacted},
		{from: 15, events: 5},
		{from: 17, events: 3},
	} {
		var got int
		w, err := tr.WatchFrom(t.Context(), c.from, WatchOptions{}, log.history(t), func(Event) error { got++; return nil })
		if c.wantErr != nil {
			if !errors.Is(err, c.wantErr) || w != nil {
				t.Fatalf("from %d: %v, %v; want %v", c.from, w, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.events {
			t.Fatalf("from %d: %d events, %v; want %d", c.from, got, err, c.events)
		}
		w.Close()
	}
	tr.hub.mu.Lock()
	defer tr.hub.mu.Unlock()
	if len(tr.hub.groups) != 0 || tr.hub.notify != nil {
		t.Fatalf("%d groups (notifier %v) left registered after failed and closed watches", len(tr.hub.groups), tr.hub.notify != nil)
	}
}

// TestWatchFromTheImageTheLogStartsAfter resumes after the index of an
// image taken past its tree's last batch (the entries between never reach
// the catalog), with the log kept only after the image: the replay starts
// from the image's index, not the tree's own, and every index the log
// starts after or holds resumes.
func TestWatchFromTheImageTheLogStartsAfter(t *testing.T) {
	log := &fakeLog{first: 17, entries: map[uint64][]byte{}, images: map[uint64][]byte{}}
	tr := New()
	for i := uint64(1); i <= 24; i++ {
		if i == 16 {
			// A membership change, say: the tree saved at 16 is at 15.
			log.images[i] = saveBytes(t, tr)
			continue
		}
		b := encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "k"})
		tr.Apply(i, b)
		if i >= log.first {
			log.entries[i] = b
		}
	}
	for from := log.first - 1; from <= 24; from++ {
		var got []uint64
		w, err := tr.WatchFrom(t.Context(), from, WatchOptions{}, log.history(t), func(ev Event) error {
			got = append(got, ev.Index)
			return nil
		})
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		w.Close()
		var want []uint64
		for i := from + 1; i <= 24; i++ {
			want = append(want, i)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("from %d: events at %v, want %v", from, got, want)
		}
	}
}

// TestWatchFromAhead resumes after an index this tree has not applied yet
// (a client that saw it on a replica further ahead): the batches up to it
// are skipped, and Progress waits for the tree to reach it.
func TestWatchFromAhead(t *testing.T) {
	tr := New()
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/a", Kind: "k"}))
	w, err := tr.WatchFrom(t.Context(), 3, WatchOptions{}, History{}, func(Event) error { return errors.New("no replay expected") })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := w.Progress(); ok {
		t.Fatal("Progress ok at index 1 for a watch from 3")
	}
	tr.Apply(2, encode(t, Op{Type: OpCreate, Path: "/b", Kind: "k"}))
	tr.Apply(3, encode(t, Op{Type: OpCreate, Path: "/c", Kind: "k"}))
	if p, ok := w.Progress(); !ok || p != 3 {
		t.Fatalf("Progress() = %d, %v; want 3, true", p, ok)
	}
	tr.Apply(4, encode(t, Op{Type: OpCreate, Path: "/d", Kind: "k"}))
	if got := drain(w); len(got) != 1 || got[0] != "4 create /d" {
		t.Fatalf("events %q; want only 4 create /d", got)
	}
}

func TestWatchProgress(t *testing.T) {
	tr := New()
	w := tr.Watch(WatchOptions{Prefix: "/mine"})
	defer w.Close()
	if p, ok := w.Progress(); !ok || p != 0 {
		t.Fatalf("new watcher: Progress() = %d, %v", p, ok)
	}
	// Batches elsewhere move an idle watcher's progress on.
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/other", Kind: "k"}))
	tr.Apply(2, encode(t, Op{Type: OpCreate, Path: "/other/x", Kind: "k"}))
	if p, ok := w.Progress(); !ok || p != 2 {
		t.Fatalf("idle watcher: Progress() = %d, %v; want 2, true", p, ok)
	}
	// An event not yet received holds it back.
	tr.Apply(3, encode(t, Op{Type: OpCreate, Path: "/mine", Kind: "k"}))
	if _, ok := w.Progress(); ok {
		t.Fatal("Progress ok with an event waiting")
	}
	next(t, w)
	if p, ok := w.Progress(); !ok || p != 3 {
		t.Fatalf("after reading: Progress() = %d, %v; want 3, true", p, ok)
	}
	w.Close()
	if _, ok := w.Progress(); ok {
		t.Fatal("Progress ok after Close")
	}
}

// TestWatchSlowConsumer: a watcher nobody reads is cut off with ErrResync
// while the applier applies every batch without waiting for it, and a
// watcher that keeps up gets every event.
func TestWatchSlowConsumer(t *testing.T) {
	tr := New()
	slow := tr.Watch(WatchOptions{Buffer: 8})
	fast := tr.Watch(WatchOptions{Buffer: 2000})
	const batches = 2000
	got := make(chan int)
	go func() {
		n := 0
		for {
			ev, err := fast.Next(t.Context())
			if err != nil {
				break
			}
			if n++; ev.Index == batches {
				break
			}
		}
		got <- n
	}()
	for i := uint64(1); i <= batches; i++ {
		tr.Apply(i, encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "k"}))
	}
	if tr.Index() != batches {
		t.Fatalf("index %d after %d batches", tr.Index(), batches)
	}
	if !errors.Is(slow.Err(), ErrResync) || len(drain(slow)) != 9 { // 8 events and "closed"
		t.Fatalf("slow watcher: err %v", slow.Err())
	}
	if n := <-got; n != batches {
		t.Fatalf("the reading watcher got %d events, want %d", n, batches)
	}
	fast.Close()
}

package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestWatchNotifierLifecycle: the notifier runs from the first watcher to
// the last; the last Close stops it and waits for it, and so does a Load
// that drops every watcher.
func TestWatchNotifierLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tr := New()
	a := tr.Watch(WatchOptions{Prefix: "/a"})
	b := tr.Watch(WatchOptions{Prefix: "/b", Buffer: 8})
	n := tr.hub.load().notify
	if n == nil {
		t.Fatal("no notifier with two watchers")
	}
	a.Close()
	select {
	case <-n.done:
		t.Fatal("the notifier stopped with a watcher left")
	default:
	}
	b.Close()
	select {
	case <-n.done:
	default:
		t.Fatal("the last Close returned before the notifier stopped")
	}
	if v := tr.hub.load(); v.notify != nil || len(v.groups) != 0 {
		t.Fatalf("after the last Close: notifier %v, %d groups", v.notify != nil, len(v.groups))
	}

	// A new watcher starts a new one; Load drops the watchers and stops it.
	w := tr.Watch(WatchOptions{})
	defer w.Close()
	n = tr.hub.load().notify
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/a", Kind: "k"}))
	src := New()
	src.Apply(1, encode(t, Op{Type: OpCreate, Path: "/z", Kind: "k"}))
	var img bytes.Buffer
	if err := src.Save(&img); err != nil {
		t.Fatal(err)
	}
	if err := tr.Load(&img); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.done:
	default:
		t.Fatal("Load returned before the notifier stopped")
	}
	if ev, err := w.Next(t.Context()); err != nil || ev.Index != 1 {
		t.Fatalf("first event after Load: %+v, %v; want the create at 1", ev, err)
	}
	if ev, err := w.Next(t.Context()); err != nil || ev.Op != OpResync {
		t.Fatalf("second event after Load: %+v, %v; want the resync mark", ev, err)
	}
	if _, err := w.Next(t.Context()); !errors.Is(err, ErrResync) {
		t.Fatalf("after the resync mark: %v, want ErrResync", err)
	}
}

// TestWatchFanoutExactlyOnce: many watchers, each read by its own
// goroutine through Next, receive every event of their filter exactly once
// and in log order while the applier applies batch after batch; a watcher
// that reads nothing is cut off with ErrResync and the applier never waits
// for it; watchers that come and go meanwhile (through the hub's fast path)
// leave no group behind.
func TestWatchFanoutExactlyOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tr := New()
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/sub", Kind: "dir"}, Op{Type: OpCreate, Path: "/other", Kind: "dir"}))
	const (
		watchers = 200
		batches  = 2000
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, watchers)
	var wg sync.WaitGroup
	for i := range watchers {
		w := tr.Watch(WatchOptions{Prefix: "/sub", Buffer: batches})
		wg.Go(func() {
			defer w.Close()
			want := uint64(2)
			for want < batches+2 {
				ev, err := w.Next(ctx)
				if err != nil {
					errs <- fmt.Errorf("watcher %d at %d: %w", i, want, err)
					return
				}
				if ev.Index != want || ev.After == nil || ev.After.Path != fmt.Sprintf("/sub/n%d", want) {
					errs <- fmt.Errorf("watcher %d: event %d %s, want the create of /sub/n%d at %d", i, ev.Index, ev.Op, want, want)
					return
				}
				want += 2 // the odd batches write under /other
			}
		})
	}
	stalled := tr.Watch(WatchOptions{Prefix: "/sub", Buffer: 4})
	defer stalled.Close()
	// Watchers that come and go, cut off or closed, while batches apply.
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		for ctx.Err() == nil {
			w := tr.Watch(WatchOptions{Prefix: "/sub", Buffer: 2})
			_, _, _ = w.TryNext()
			w.Close()
		}
	}()
	for i := uint64(2); i < batches+2; i++ {
		dir := "/sub"
		if i%2 == 1 {
			dir = "/other"
		}
		tr.Apply(i, encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("%s/n%d", dir, i), Kind: "k"}))
	}
	wg.Wait()
	cancel()
	<-churnDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !errors.Is(stalled.Err(), ErrResync) {
		t.Fatalf("a watcher that read nothing of %d events, Buffer 4: Err %v, want ErrResync", batches/2, stalled.Err())
	}
	stalled.Close()
	tr.hub.mu.Lock()
	defer tr.hub.mu.Unlock()
	if len(tr.hub.groups) != 0 || tr.hub.notify != nil {
		t.Fatalf("%d groups (notifier %v) left after every watcher closed", len(tr.hub.groups), tr.hub.notify != nil)
	}
}

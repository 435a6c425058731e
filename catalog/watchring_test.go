package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestWatchWakesEveryWaiter parks many watchers of one filter in Next and
// applies one batch: every one of them receives its event, though the
// applier wakes only the first (the rest wake one another), including
// when some of them left before the batch.
func TestWatchWakesEveryWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New()
		const n = 1000
		got := make([]error, n)
		cancels := make([]context.CancelFunc, n)
		var wg sync.WaitGroup
		for i := range n {
			w := tr.Watch(WatchOptions{Prefix: "/a"})
			ctx, cancel := context.WithCancel(t.Context())
			cancels[i] = cancel
			wg.Go(func() {
				defer w.Close()
				ev, err := w.Next(ctx)
				if err == nil && (ev.Index != 1 || ev.After.Path != "/a") {
					err = fmt.Errorf("event %d %s %s", ev.Index, ev.Op, ev.After.Path)
				}
				got[i] = err
			})
		}
		synctest.Wait() // every watcher waits in Next
		for i := 0; i < n; i += 7 {
			cancels[i]() // these leave before the batch
		}
		synctest.Wait()
		tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/a", Kind: "k"}))
		wg.Wait()
		for i, err := range got {
			switch {
			case i%7 == 0 && !errors.Is(err, context.Canceled):
				t.Fatalf("watcher %d, cancelled: %v", i, err)
			case i%7 != 0 && err != nil:
				t.Fatalf("watcher %d: %v", i, err)
			}
		}
		for _, c := range cancels {
			c()
		}
	})
}

// TestWakeupRelayOnLeave: the wake-up reaches the first width waiters,
// and each waiter woken passes it on to the next one, also one woken just
// as it leaves (its context ended), so the waiters after it still wake.
func TestWakeupRelayOnLeave(t *testing.T) {
	var p atomic.Pointer[wakeup]
	u := current(&p)
	var ws []*waiter
	for range 4 {
		w, ok := u.join()
		if !ok {
			t.Fatal("join failed before the wake")
		}
		ws = append(ws, w)
	}
	woken := func() []int {
		var n []int
		for _, w := range ws {
			n = append(n, len(w.ch))
		}
		return n
	}
	wake(&p, 1)
	if _, ok := u.join(); ok {
		t.Fatal("joined a generation that has fired")
	}
	if got := woken(); !slices.Equal(got, []int{1, 0, 0, 0}) {
		t.Fatalf("the wake reached %v, want only the first", got)
	}
	<-ws[0].ch
	u.leave(ws[0]) // woken: passes it on to one more
	if got := woken(); !slices.Equal(got, []int{0, 1, 0, 0}) {
		t.Fatalf("after the first passed it on: %v, want only the second", got)
	}
	ws[2].state.Store(waiterGone) // left before the wake reached it
	u.leave(ws[1])                // woken, leaving without reading
	if got := woken(); !slices.Equal(got, []int{0, 1, 0, 1}) {
		t.Fatalf("after the second passed it on: %v, want the fourth (the third left)", got)
	}
}

// TestWatchNextBlocksAndEnds: Next waits for an event, returns the
// context's cause when it ends, and ErrClosed once Close ran, also for a
// Next already waiting.
func TestWatchNextBlocksAndEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New()
		w := tr.Watch(WatchOptions{})
		res := make(chan error, 1)
		go func() {
			ev, err := w.Next(t.Context())
			if err == nil && ev.Index != 1 {
				err = fmt.Errorf("event at %d", ev.Index)
			}
			res <- err
		}()
		synctest.Wait()
		select {
		case err := <-res:
			t.Fatalf("Next returned before any batch: %v", err)
		default:
		}
		tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/a", Kind: "k"}))
		if err := <-res; err != nil {
			t.Fatal(err)
		}

		cause := errors.New("the caller gave up")
		ctx, cancel := context.WithCancelCause(t.Context())
		go func() { _, err := w.Next(ctx); res <- err }()
		synctest.Wait()
		cancel(cause)
		if err := <-res; !errors.Is(err, cause) {
			t.Fatalf("Next after its context ended: %v, want the cause", err)
		}

		go func() { _, err := w.Next(t.Context()); res <- err }()
		synctest.Wait()
		w.Close()
		if err := <-res; !errors.Is(err, ErrClosed) {
			t.Fatalf("waiting Next after Close: %v", err)
		}
		if _, err := w.Next(t.Context()); !errors.Is(err, ErrClosed) || w.Err() != nil {
			t.Fatalf("Next after Close: %v (Err %v)", err, w.Err())
		}
	})
}

// TestWatchRegisterWhileApplying registers watchers while the applier runs,
// without the tree's lock: each one receives the events of exactly the
// batches after its Start, in order.
func TestWatchRegisterWhileApplying(t *testing.T) {
	tr := New()
	const batches = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); i <= batches; i++ {
			tr.Apply(i, encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "k"}))
		}
	}()
	var ws []*Watcher
	for i := 0; ; i++ {
		select {
		case <-done:
		default:
			ws = append(ws, tr.Watch(WatchOptions{Buffer: batches}))
			continue
		}
		break
	}
	if len(ws) < 2 {
		t.Fatalf("only %d watchers registered while applying", len(ws))
	}
	for _, w := range ws {
		want := w.Start() + 1
		for _, ev := range drainAll(w) {
			if ev.Index != want {
				t.Fatalf("watcher from %d: event at %d, want %d", w.Start(), ev.Index, want)
			}
			want++
		}
		if want != batches+1 || w.Err() != nil {
			t.Fatalf("watcher from %d read up to %d of %d (err %v)", w.Start(), want-1, batches, w.Err())
		}
		w.Close()
	}
}

// TestWatchRingBounded: the ring keeps about twice the largest Buffer in
// events, a watcher it has moved past is cut off at once, and once the last
// watcher closes the next batch releases what the ring held.
func TestWatchRingBounded(t *testing.T) {
	tr := New()
	slow := tr.Watch(WatchOptions{Buffer: 4})
	for i := uint64(1); i <= 100; i++ {
		tr.Apply(i, encode(t, Op{Type: OpCreate, Path: fmt.Sprintf("/n%d", i), Kind: "k"}))
		if tr.ring.held > 8 {
			t.Fatalf("the ring holds %d events after batch %d, want at most 8", tr.ring.held, i)
		}
	}
	if !errors.Is(slow.Err(), ErrResync) {
		t.Fatalf("Err() = %v for a watcher the ring moved past", slow.Err())
	}
	if got := drain(slow); len(got) != 1 || got[0] != "closed" {
		t.Fatalf("watcher the ring moved past read %q", got)
	}
	slow.Close()
	tr.Apply(101, encode(t, Op{Type: OpCreate, Path: "/x", Kind: "k"}))
	if tr.ring.held != 0 || tr.ring.get(tr.ring.head.Load()-1) != nil {
		t.Fatalf("the ring holds %d events with no watcher left", tr.ring.held)
	}
	// A filter nobody matches records nothing; one watcher per filter
	// group wakes.
	a := tr.Watch(WatchOptions{Prefix: "/a"})
	b := tr.Watch(WatchOptions{Prefix: "/a"})
	defer a.Close()
	defer b.Close()
	if g := tr.hub.load().groups; len(g) != 1 || g[0].n.Load() != 2 {
		t.Fatalf("%d groups for two watchers of one filter", len(g))
	}
	tr.Apply(102, encode(t, Op{Type: OpCreate, Path: "/y", Kind: "k"}))
	if tr.ring.held != 0 {
		t.Fatalf("events recorded for a batch no filter matches")
	}
}

package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// The bank: accounts whose balances always sum to the same total and of
// which exactly half have owner 0. Every batch preserves both, so a reader
// that saw half a batch would see a wrong sum or count.
const (
	bankAccounts = 60
	bankTotal    = bankAccounts * 100
)

func bankTree(t testing.TB) (*Tree, uint64) {
	tr := New()
	ops := []Op{
		{Type: OpCreate, Path: "/bank", Kind: "dir"},
		{Type: OpCreateIndex, Kind: "acct", Attr: "owner"},
	}
	for i := 0; i < bankAccounts; i++ {
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/bank/a%d", i), Kind: "acct",
			Set: map[string]Value{"bal": Int(100), "owner": Int(int64(i % 2))}})
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	return tr, 2
}

func mustApply(t testing.TB, tr *Tree, index uint64, b Batch) *Result {
	t.Helper()
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	res := tr.Apply(index, data).(*Result)
	if res.Err != nil {
		t.Fatalf("apply %d: %v", index, res.Err)
	}
	return res
}

// bankBatch moves money between two accounts and swaps their owners, or
// replaces an account by a new one (delete + create, reusing its slot), or
// renames one; all keep the invariants.
func bankBatch(r *rand.Rand, tr *Tree) Batch {
	accts := tr.Children("/bank")
	a := "/bank/" + accts[r.IntN(len(accts))]
	b := "/bank/" + accts[r.IntN(len(accts))]
	na, _ := tr.Get(a)
	nb, _ := tr.Get(b)
	switch r.IntN(4) {
	case 0, 1:
		if a == b {
			return Batch{Ops: []Op{{Type: OpCheck, Path: a}}}
		}
		amt := int64(r.IntN(50))
		return Batch{Ops: []Op{
			{Type: OpUpdate, Path: a, Set: map[string]Value{"bal": Int(na.Attrs["bal"].Int64() - amt), "owner": nb.Attrs["owner"]}, Cond: Cond{Modified: na.Modified}},
			{Type: OpUpdate, Path: b, Set: map[string]Value{"bal": Int(nb.Attrs["bal"].Int64() + amt), "owner": na.Attrs["owner"]}, Cond: Cond{Modified: nb.Modified}},
		}}
	case 2:
		nn := fmt.Sprintf("/bank/n%d", r.Uint64())
		return Batch{Ops: []Op{
			{Type: OpDelete, Path: a},
			{Type: OpCreate, Path: nn, Kind: "acct", Set: na.Attrs},
		}}
	default:
		return Batch{Ops: []Op{{Type: OpMove, Path: a, To: fmt.Sprintf("/bank/m%d", r.Uint64())}}}
	}
}

func checkBank(nodes []Node) error {
	sum, owner0 := int64(0), 0
	for _, n := range nodes {
		sum += n.Attrs["bal"].Int64()
		if n.Attrs["owner"].Int64() == 0 {
			owner0++
		}
	}
	if len(nodes) != bankAccounts || sum != bankTotal || owner0 != bankAccounts/2 {
		return fmt.Errorf("saw %d accounts, sum %d, %d with owner 0: half a batch", len(nodes), sum, owner0)
	}
	return nil
}

// TestReadersAndWatchersRaceApplier runs point reads, long reads in tiny
// chunks (so that the applier interleaves with them), saves, and watchers
// against a busy applier. Run it with -race.
func TestReadersAndWatchersRaceApplier(t *testing.T) {
	defer func(c int, s uint64, m int64) { longChunk, saveChunkIDs, compactMin = c, s, m }(longChunk, saveChunkIDs, compactMin)
	longChunk, saveChunkIDs, compactMin = 3, 5, 0

	tr, next := bankTree(t)
	const batches = 1500
	watch := tr.Watch(WatchOptions{Prefix: "/bank", Buffer: batches * 4})
	kindWatch := tr.Watch(WatchOptions{Kind: "acct", Buffer: batches * 4})
	slow := tr.Watch(WatchOptions{Buffer: 2}) // never read: must be dropped, not block
	other := tr.Watch(WatchOptions{Prefix: "/elsewhere", Buffer: 1})

	done := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	reader := func(name string, f func() error) {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-done:
					if n == 0 {
						errs <- fmt.Errorf("%s never ran", name)
					}
					return
				default:
				}
				if err := f(); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		})
	}
	reader("OfKind", func() error { return checkBank(tr.OfKind("acct")) })
	reader("Find", func() error {
		if n := len(tr.Find("acct", "owner", Int(0))); n != bankAccounts/2 {
			return fmt.Errorf("found %d with owner 0", n)
		}
		return nil
	})
	reader("Save", func() error {
		var buf bytes.Buffer
		if err := tr.Save(&buf); err != nil {
			return err
		}
		c := New()
		if err := c.Load(&buf); err != nil {
			return err
		}
		return checkBank(c.OfKind("acct"))
	})
	reader("Get", func() error {
		if _, ok := tr.Get("/bank"); !ok {
			return errors.New("no /bank")
		}
		if n := tr.ChildCount("/bank"); n != bankAccounts {
			return fmt.Errorf("/bank has %d children", n)
		}
		return nil
	})

	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < batches; i++ {
		mustApply(t, tr, next, bankBatch(r, tr))
		next++
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// The watchers saw every change in log order; replaying the balance
	// deltas per batch must net to zero.
	for _, w := range []*Watcher{watch, kindWatch} {
		last := uint64(0)
		delta := map[uint64]int64{}
		events := 0
		evs := drainAll(w)
		w.Close()
		for _, ev := range evs {
			events++
			if ev.Index < last {
				t.Fatalf("event at %d after %d", ev.Index, last)
			}
			last = ev.Index
			if ev.After != nil && ev.After.Kind == "acct" {
				delta[ev.Index] += ev.After.Attrs["bal"].Int64()
			}
			if ev.Before != nil && ev.Before.Kind == "acct" {
				delta[ev.Index] -= ev.Before.Attrs["bal"].Int64()
			}
		}
		if events < batches/2 || last != next-1 {
			t.Fatalf("watcher got %d events up to %d, applied up to %d", events, last, next-1)
		}
		for idx, d := range delta {
			if d != 0 {
				t.Fatalf("events of batch %d change the total by %d", idx, d)
			}
		}
		if w.Err() != nil {
			t.Fatalf("closed watcher Err() = %v", w.Err())
		}
	}
	if !errors.Is(slow.Err(), ErrResync) {
		t.Fatalf("slow watcher Err() = %v, want ErrResync", slow.Err())
	}
	if got := drain(slow); len(got) != 3 || got[2] != "closed" {
		t.Fatalf("slow watcher holds %q, want its full buffer (2 events) and its end", got)
	}
	if other.Err() != nil || len(drain(other)) != 0 {
		t.Fatalf("watcher of an unrelated prefix got events (err %v)", other.Err())
	}
	other.Close()
	other.Close() // idempotent
	// No history is kept once long reads end.
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if n := len(tr.s.lr.hist) + len(tr.s.lr.gone) + len(tr.s.lr.active); n != 0 {
		t.Fatalf("%d history entries left after all long reads ended", n)
	}
}

package catalog

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Waking watchers. The applier never wakes a watcher itself. A goroutine
// it readied would run in its place on its P, and thousands of readied
// watchers would queue ahead of it once the scheduler preempts it; and
// every cache line it shares with the watchers costs it a miss per batch.
// So each batch records the groups (filters) it matched and the applier
// kicks the notifier, one goroutine the hub owns while it has watchers,
// and only while that sleeps. The notifier follows the ring, and for each
// group a batch matched starts a relay that wakes a few waiters, each of
// which wakes the next one before it reads: the wake-ups run on the
// watchers' goroutines, and the watchers runnable at any time stay few.
// While batches keep coming the notifier stays awake, yielding between
// rounds, so the applier's kick is one load of a line nobody writes.

// notifier is the goroutine that wakes the waiting watchers of the groups
// the published batches matched. It runs from the hub's first watcher to
// its last.
type notifier struct {
	// What kick reads, on a line the notifier writes only as it sleeps.
	ch      chan struct{} // the kick; holds one at most (see kick)
	pending atomic.Bool   // set by a kick, cleared when the notifier sleeps
	_       cacheLinePad

	hub  *watchHub
	ring *watchRing
	stop chan struct{} // closed to end run
	done chan struct{} // closed when run has returned
	// run's own.
	seq   uint64                   // the next batch to look at
	woken map[*watchGroup]struct{} // the groups woken in this round
}

// startNotifier starts the notifier of h, following r from its head.
func startNotifier(h *watchHub, r *watchRing) *notifier {
	n := &notifier{hub: h, ring: r, ch: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		seq: r.head.Load(), woken: map[*watchGroup]struct{}{}}
	go n.run()
	return n
}

// kick tells the notifier that batches were published. It never blocks:
// a kick is sent only by the caller that turns pending true, and the
// notifier turns it false only with the channel empty (see run).
func (n *notifier) kick() {
	if n.pending.Load() || n.pending.Swap(true) {
		return
	}
	n.ch <- struct{}{}
}

func (n *notifier) run() {
	defer close(n.done)
	for {
		select {
		case <-n.ch:
		case <-n.stop:
			return
		}
		// Awake, with pending set: rounds until one finds nothing new.
		for {
			n.round()
			if n.seq < n.ring.head.Load() {
				runtime.Gosched() // let the woken watchers read
				select {
				case <-n.stop:
					return
				default:
				}
				continue
			}
			n.pending.Store(false)
			if n.seq >= n.ring.head.Load() || n.pending.Swap(true) {
				// Asleep, or a kick published meanwhile is in the
				// channel (or about to be): take it.
				break
			}
		}
	}
}

// round wakes the groups the batches published since the last round
// matched, each once; every group when batches were dropped before it
// looked at them, or the tree was replaced.
func (n *notifier) round() {
	head := n.ring.head.Load()
	all := false
	for ; n.seq < head && !all; n.seq++ {
		b := n.ring.get(n.seq)
		if b == nil || b.resync {
			all = true
			break
		}
		for _, g := range b.groups {
			if _, ok := n.woken[g]; !ok {
				n.woken[g] = struct{}{}
				wake(&g.wake, relayWidth())
			}
		}
	}
	if all {
		n.seq = head
		for _, g := range n.hub.load().groups {
			if _, ok := n.woken[g]; !ok {
				wake(&g.wake, relayWidth())
			}
		}
	}
	clear(n.woken)
}

// relayWidth is how many waiters the notifier wakes itself: enough to keep
// every P busy while the rest wake one another.
func relayWidth() int { return runtime.GOMAXPROCS(0) }

// close stops the notifier and waits for it to return.
func (n *notifier) close() {
	close(n.stop)
	<-n.done
}

// wakeup is one generation of a group's waiters, ended by the notifier
// after a batch that matched the group's filter. The notifier wakes only
// the first few live waiters, and every waiter woken wakes the next one
// before it reads, so a wake-up costs the notifier the same for one waiter
// or ten thousand, and the waiters runnable at once stay few.
type wakeup struct {
	mu      sync.Mutex
	waiters []*waiter // appended until fired; read-only after
	fired   bool
	next    atomic.Int64 // the next waiter to wake, once fired
}

// waiter is one Next waiting in a generation.
type waiter struct {
	ch    chan struct{} // receives the wake-up
	state atomic.Int32  // waiterWaiting, waiterWoken or waiterGone
}

const (
	waiterWaiting = iota
	waiterWoken
	waiterGone
)

// current returns the generation a waiter joins now.
func current(p *atomic.Pointer[wakeup]) *wakeup {
	for {
		if u := p.Load(); u != nil {
			return u
		}
		u := new(wakeup)
		if p.CompareAndSwap(nil, u) {
			return u
		}
	}
}

// join adds a waiter; false when the generation has fired already (the
// caller reads again).
func (u *wakeup) join() (*waiter, bool) {
	w := &waiter{ch: make(chan struct{}, 1)}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fired {
		return nil, false
	}
	u.waiters = append(u.waiters, w)
	return w, true
}

// leave takes w out; a waiter woken meanwhile passes the wake-up on to the
// next one.
func (u *wakeup) leave(w *waiter) {
	if !w.state.CompareAndSwap(waiterWaiting, waiterGone) {
		u.relay(1)
	}
}

// relay wakes up to n waiters still waiting.
func (u *wakeup) relay(n int) {
	for n > 0 {
		i := u.next.Add(1) - 1
		if i >= int64(len(u.waiters)) {
			return
		}
		w := u.waiters[i]
		if w.state.CompareAndSwap(waiterWaiting, waiterWoken) {
			w.ch <- struct{}{}
			n--
		}
	}
}

// wake ends the current generation of p: width of its waiters wake, then
// the rest one from another.
func wake(p *atomic.Pointer[wakeup], width int) {
	u := p.Swap(nil)
	if u == nil {
		return
	}
	u.mu.Lock()
	u.fired = true
	u.mu.Unlock()
	u.relay(width)
}

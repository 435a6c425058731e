package frontendtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrReset is the error of a connection the network reset (Faults.Reset).
var ErrReset = errors.New("frontendtest: connection reset")

// Faults are the faults of one directed link (the bytes one address writes
// to another, on connections dialed either way).
type Faults struct {
	// Delay and Jitter delay every write by Delay plus a uniform draw in
	// [0, Jitter): the link's latency. Writes on one connection stay in
	// order, as on TCP.
	Delay, Jitter time.Duration
	// Reset is the probability that a write resets its connection instead
	// (both ends close; the writer gets ErrReset): a stream of messages
	// loses the ones in flight, as a dropped TCP connection does. The
	// network carries byte streams, so it drops connections, not single
	// messages.
	Reset float64
	// Duplicate is the probability that a write by the end that dialed
	// the connection (a request, or a frame of a raft stream) also sends
	// everything that end wrote on it so far again, on a fresh connection
	// to the same listener, Lag later (see duplicate.go): each request and
	// message in it arrives twice, and the copy after messages sent
	// later, out of order. A connection has one copy at a time; one
	// dialed while the link's Duplicate is 0 is never copied.
	Duplicate float64
	// Lag is how much later than its original a copy leaves: uniform in
	// [0, Lag), then the link's Delay and Jitter.
	Lag time.Duration
}

// dlink is a directed link: bytes written by from to to.
type dlink struct{ from, to string }

// Seed reseeds the dice of the faults (default seed 1).
func (n *Network) Seed(seed uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rng = rand.New(rand.NewPCG(seed, 1))
}

// CutOneWay cuts the links from from to each of to: dials from from to
// them fail with ErrPartitioned and the connections from dialed to them
// close, while they still dial from and are answered. A member that sends
// its messages on connections it dials (raft streams, heartbeats,
// forwarded writes) then reaches none of them, but hears from them.
func (n *Network) CutOneWay(from string, to ...string) {
	n.mu.Lock()
	for _, b := range to {
		n.oneWay[dlink{from, b}] = true
	}
	closing := n.severed()
	n.mu.Unlock()
	closeAll(closing)
}

// SetDown takes addr off the network (true: every connection to or from
// it closes and every dial to or from it fails, as after a power cut) or
// puts it back (false).
func (n *Network) SetDown(addr string, down bool) {
	n.mu.Lock()
	if !down {
		delete(n.down, addr)
		n.mu.Unlock()
		return
	}
	n.down[addr] = true
	closing := n.severed()
	n.mu.Unlock()
	closeAll(closing)
}

// SetFaults sets the faults of the link from from to to; the zero Faults
// clears them. ClearFaults clears every link's.
func (n *Network) SetFaults(from, to string, f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f == (Faults{}) {
		delete(n.faults, dlink{from, to})
		return
	}
	n.faults[dlink{from, to}] = f
}

// Link reports the state of the link from from to to: its faults
// (SetFaults), and the error a dial from from to to fails with now
// (ErrPartitioned: the link is cut both ways or that way, or an address
// is down) or nil. A simulator reads its ground truth of who can reach
// whom from it.
func (n *Network) Link(from, to string) (Faults, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.faults[dlink{from, to}], n.blocked(from, to)
}

// ClearFaults clears the faults of every link.
func (n *Network) ClearFaults() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.faults)
}

// fault applies the faults of the link from from to to to one write on p:
// it waits out the delay (or p's close) and returns ErrReset after
// closing p when the write resets it.
func (n *Network) fault(p *pair, from, to string) error {
	n.mu.Lock()
	f, ok := n.faults[dlink{from, to}]
	var delay time.Duration
	reset := false
	if ok && p.copying(from) && f.Duplicate > 0 && n.rng.Float64() < f.Duplicate {
		lag := f.Delay
		if f.Lag > 0 {
			lag += time.Duration(n.rng.Int64N(int64(f.Lag)))
		}
		if f.Jitter > 0 {
			lag += time.Duration(n.rng.Int64N(int64(f.Jitter)))
		}
		n.duplicate(p, lag)
	}
	if ok {
		delay = f.Delay
		if f.Jitter > 0 {
			delay += time.Duration(n.rng.Int64N(int64(f.Jitter)))
		}
		reset = f.Reset > 0 && n.rng.Float64() < f.Reset
	}
	n.mu.Unlock()
	if reset {
		n.mu.Lock()
		delete(n.pairs, p)
		n.mu.Unlock()
		p.reset.Store(true)
		p.close()
		return fmt.Errorf("write from %s to %s: %w", from, to, ErrReset)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.closed:
		}
	}
	return nil
}

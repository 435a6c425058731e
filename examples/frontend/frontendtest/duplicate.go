package frontendtest

import (
	"io"
	"net"
	"sync"
	"time"
)

// Duplicated and reordered messages (Faults.Duplicate). The network
// carries byte streams, and a stream neither repeats nor reorders its own
// bytes; what does arrive twice, and late, is a request sent again on
// another connection (a client's or a proxy's retry, a stream opened anew
// while the old one still drains). So a copy here is a fresh connection
// from the same address to the same listener that sends everything the
// original's dialing end wrote so far, Lag later: the server reads each
// request (a forwarded write, a heartbeat, a join, a raft stream's frames)
// a second time, after requests and messages sent since, and the copy's
// answers go nowhere.

// maxCopied bounds the bytes a connection keeps for its copies; a copy of
// a longer connection sends its first maxCopied bytes (a raft stream's
// first frames: its copy ends mid-frame, as a dropped connection's does).
const maxCopied = 64 << 10

// copyLife bounds how long a copy's connection stays open once it is
// accepted: long enough for the server to read and answer every request
// in it.
const copyLife = 5 * time.Second

// record keeps b, written by the dialing end, for the connection's
// copies (up to maxCopied bytes).
func (p *pair) record(b []byte) {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if room := maxCopied - len(p.rec); room > 0 {
		p.rec = append(p.rec, b[:min(len(b), room)]...)
	}
}

// copying reports whether writes from from on p are copied: from is the
// dialing end and the link copied connections when p was dialed.
func (p *pair) copying(from string) bool { return p.copied && p.from == from }

// duplicate sends what p's dialing end wrote so far again, lag from now,
// on a connection of its own (the copy's goroutine, which Close waits
// for), unless a copy of p is on its way or open; n.mu is held.
func (n *Network) duplicate(p *pair, lag time.Duration) {
	select {
	case <-n.done: // closed: no copy starts after Close began to wait
		return
	default:
	}
	p.recMu.Lock()
	data := append([]byte(nil), p.rec...)
	p.recMu.Unlock()
	if len(data) == 0 || !p.inCopy.CompareAndSwap(false, true) {
		return // one copy of a connection at a time: a busy stream copies no faster
	}
	n.copies.Go(func() {
		defer p.inCopy.Store(false)
		n.sendCopy(p.from, p.to, data, lag)
	})
}

// sendCopy waits lag, dials to from from as Dial does (a cut link or a
// down address drops the copy), writes data, discards the answers, and
// closes the connection when the server does, after copyLife, or when
// the network closes.
func (n *Network) sendCopy(from, to string, data []byte, lag time.Duration) {
	wait := time.NewTimer(lag)
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-n.done:
		return
	}
	n.mu.Lock()
	l, ok := n.listeners[to]
	blocked := n.blocked(from, to)
	n.mu.Unlock()
	if !ok || blocked != nil {
		return
	}
	client, server := net.Pipe()
	p := &pair{n: n, from: from, to: to, closed: make(chan struct{})}
	p.client = &conn{Conn: client, local: addr(from), remote: addr(to), p: p}
	p.server = &conn{Conn: server, local: addr(to), remote: addr(from), p: p}
	select {
	case l.accept <- p.server:
	case <-l.done:
		return
	case <-n.done:
		return
	}
	n.mu.Lock()
	if n.blocked(from, to) != nil { // cut while the listener accepted
		n.mu.Unlock()
		p.close()
		return
	}
	n.pairs[p] = struct{}{}
	n.mu.Unlock()
	n.delivered.Add(1)
	var ends sync.WaitGroup
	ends.Go(func() { _, _ = io.Copy(io.Discard, client) })
	ends.Go(func() { _, _ = client.Write(data) })
	life := time.NewTimer(copyLife)
	select {
	case <-p.closed:
	case <-life.C:
	case <-n.done:
	}
	life.Stop()
	n.mu.Lock()
	delete(n.pairs, p)
	n.mu.Unlock()
	p.close()
	ends.Wait()
}

// Copies returns the number of copies a listener accepted so far.
func (n *Network) Copies() uint64 { return n.delivered.Load() }

// Close drops the copies not yet sent and closes those open, and waits
// for their goroutines. Close the servers and clients on the network
// first; the network is not used after Close.
func (n *Network) Close() {
	n.mu.Lock() // duplicate starts copies under n.mu, seeing done open
	n.closeOnce.Do(func() { close(n.done) })
	n.mu.Unlock()
	n.copies.Wait()
}

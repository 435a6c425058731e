package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// netem is the harness's network between members: a TCP proxy in front of
// every member and, per directed pair of members, a rule that cuts, delays
// or drops the traffic from one to the other.
//
// Every member has a loopback IP of its own and dials its peers from it
// (the binaries' -listen names that IP: secure.SourceDialer), so the proxy
// in front of member i, which listens on i's advertised address and
// forwards to i's -listen address, knows the sender from the connection's
// source IP. Any other source (the test's clients dial from 127.0.0.1) is
// the "client", never cut unless a rule names it.
//
// A rule on from→to acts on the bytes from sends to to, whichever side
// dialed: on the connections from dialed to to, its requests; on those to
// dialed to from, its answers. The other direction flows. A held direction
// stops reading, so the sender's buffers fill as they would behind a black
// hole. Healing resumes forwarding and delivers what was held, as TCP's
// retransmissions deliver it after a partition shorter than their timeout;
// nothing is closed on heal (a side that gave up has closed its
// connection, and the proxy closes the other side once forwarding to it
// fails). reset closes a member's connections, for a partition that
// outlived them.
type netem struct {
	t      *testing.T
	closed chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	names   map[string]string    // source IP -> member name
	rules   map[netLink]linkRule // absent: forward at once
	changed chan struct{}        // closed and replaced on every rule change
	lns     []net.Listener
	conns   map[net.Conn]netLink // dialer → member of each proxied connection
}

// netLink is one direction between two members.
type netLink struct{ from, to string }

// linkRule is what happens to the bytes of one direction.
type linkRule struct {
	hold  bool          // not forwarded until healed
	delay time.Duration // added to every forwarded chunk
}

// clientName is the sender of any connection from an IP no member has.
const clientName = "client"

func newNetem(t *testing.T) *netem {
	n := &netem{t: t, closed: make(chan struct{}), names: map[string]string{}, rules: map[netLink]linkRule{},
		changed: make(chan struct{}), conns: map[net.Conn]netLink{}}
	t.Cleanup(n.close)
	return n
}

// memberIP is the loopback IP of the member with index i (all of 127/8 is
// local on Linux).
func memberIP(i int) string { return net.IPv4(127, 0, 0, byte(10+i)).String() }

// reserveAddrOn returns ip with a free port, held until release is
// called: a listener opened meanwhile (a member's proxy) cannot take it.
func reserveAddrOn(t *testing.T, ip string) (addr string, release func()) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return l.Addr().String(), func() { l.Close() }
}

// front puts a proxy in front of member name, whose connections come from
// ip: it listens on a free port of ip (the address the member advertises,
// returned) and forwards to target (the member's -listen).
func (n *netem) front(name, ip, target string) (advertised string) {
	n.t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		n.t.Fatal(err)
	}
	n.mu.Lock()
	n.names[ip] = name
	n.lns = append(n.lns, ln)
	n.mu.Unlock()
	n.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.wg.Go(func() { n.forward(c, name, target) })
		}
	})
	return ln.Addr().String()
}

// forward joins the accepted connection c to a new one to target, the
// member to.
func (n *netem) forward(c net.Conn, to, target string) {
	from := clientName
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		n.mu.Lock()
		if name, ok := n.names[a.IP.String()]; ok {
			from = name
		}
		n.mu.Unlock()
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	if !n.track(netLink{from, to}, c, up) {
		return
	}
	defer n.untrack(c, up)
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done); c.Close(); up.Close() }) }
	var both sync.WaitGroup
	both.Go(func() { n.pump(netLink{from, to}, up, c, done, stop) })
	both.Go(func() { n.pump(netLink{to, from}, c, up, done, stop) })
	both.Wait()
	stop()
}

// pump copies src to dst under the rule of l until src ends (dst is then
// half-closed) or a write fails (both connections are then closed).
func (n *netem) pump(l netLink, dst, src net.Conn, done <-chan struct{}, stop func()) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if !n.await(l, time.Now(), done) {
				return
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				stop()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			stop()
			return
		}
	}
}

// await blocks a chunk read at readAt while l holds and until its delay
// has passed. It reports false if the connection or the netem closed
// meanwhile.
func (n *netem) await(l netLink, readAt time.Time, done <-chan struct{}) bool {
	for {
		n.mu.Lock()
		r, changed := n.rules[l], n.changed
		n.mu.Unlock()
		var timer *time.Timer
		var due <-chan time.Time
		switch left := time.Until(readAt.Add(r.delay)); {
		case r.hold:
		case left > 0:
			timer = time.NewTimer(left)
			due = timer.C
		default:
			return true
		}
		select {
		case <-changed:
			if timer != nil {
				timer.Stop()
			}
		case <-due:
			return true
		case <-done:
			return false
		case <-n.closed:
			return false
		}
	}
}

func (n *netem) track(l netLink, conns ...net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.closed:
		for _, c := range conns {
			c.Close()
		}
		return false
	default:
	}
	for _, c := range conns {
		n.conns[c] = l
	}
	return true
}

func (n *netem) untrack(conns ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range conns {
		delete(n.conns, c)
	}
}

// set changes the rules of the given directions and wakes the held chunks
// to look again.
func (n *netem) set(r linkRule, links ...netLink) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range links {
		if r == (linkRule{}) {
			delete(n.rules, l)
		} else {
			n.rules[l] = r
		}
	}
	close(n.changed)
	n.changed = make(chan struct{})
}

// drop holds the traffic from each of from to each of to, one way.
func (n *netem) drop(from, to []string) {
	n.set(linkRule{hold: true}, cross(from, to)...)
}

// cut holds the traffic between each of a and each of b, both ways.
func (n *netem) cut(a, b []string) {
	n.set(linkRule{hold: true}, append(cross(a, b), cross(b, a)...)...)
}

// delay adds d to the traffic between each of a and each of b, both ways.
func (n *netem) delay(a, b []string, d time.Duration) {
	n.set(linkRule{delay: d}, append(cross(a, b), cross(b, a)...)...)
}

// reset closes every connection between name and another member, as a
// connection a partition outlived its timeouts ends; clients' connections
// stay.
func (n *netem) reset(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c, l := range n.conns {
		if (l.from == name || l.to == name) && l.from != clientName {
			c.Close()
		}
	}
}

// heal forwards everything at once again, held bytes first.
func (n *netem) heal() {
	n.mu.Lock()
	links := make([]netLink, 0, len(n.rules))
	for l := range n.rules {
		links = append(links, l)
	}
	n.mu.Unlock()
	n.set(linkRule{}, links...)
}

func cross(from, to []string) []netLink {
	var out []netLink
	for _, f := range from {
		for _, t := range to {
			if f != t {
				out = append(out, netLink{f, t})
			}
		}
	}
	return out
}

// close stops the proxies and their connections and waits for them.
func (n *netem) close() {
	n.mu.Lock()
	select {
	case <-n.closed:
		n.mu.Unlock()
		return
	default:
	}
	close(n.closed)
	for _, ln := range n.lns {
		ln.Close()
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// TestNetemHoldsOneDirection: with a→b dropped, a's bytes to b stall on
// the connection a dialed and b's answers flow; on the connection b
// dialed to a, b's bytes flow and a's answers stall; healing delivers what
// was held; a delay delays; a reset ends the members' connections only.
func TestNetemHoldsOneDirection(t *testing.T) {
	n := newNetem(t)
	ipA, ipB := memberIP(1), memberIP(2)
	echo := func(ip string) string { // a member that answers every line it reads
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
			}
		}()
		return ln.Addr().String()
	}
	addrA := n.front("a", ipA, echo(ipA))
	addrB := n.front("b", ipB, echo(ipB))
	dialFrom := func(ip, addr string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	roundTrip := func(c net.Conn, within time.Duration) bool {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		var b [1]byte
		_, err := io.ReadFull(c, b[:])
		return err == nil
	}
	aToB, bToA := dialFrom(ipA, addrB), dialFrom(ipB, addrA)
	if !roundTrip(aToB, 5*time.Second) || !roundTrip(bToA, 5*time.Second) {
		t.Fatal("no round trip through a healthy proxy")
	}

	n.drop([]string{"a"}, []string{"b"})
	// A round trip needs both directions: each stalls on its own side.
	if roundTrip(aToB, 300*time.Millisecond) {
		t.Fatal("a's request reached b with a→b dropped")
	}
	if roundTrip(bToA, 300*time.Millisecond) {
		t.Fatal("a's answer reached b with a→b dropped")
	}
	// A client is no member: no rule between members holds its bytes.
	client := dialFrom("127.0.0.1", addrA)
	if !roundTrip(client, 5*time.Second) {
		t.Fatal("a client is cut by a rule between members")
	}
	n.heal()
	// The held bytes arrive: the stalled echoes complete.
	var b [2]byte
	for _, c := range []net.Conn{aToB, bToA} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			t.Fatalf("held bytes not delivered after heal: %v", err)
		}
	}

	n.delay([]string{"a"}, []string{"b"}, 150*time.Millisecond)
	start := time.Now()
	if !roundTrip(aToB, 5*time.Second) {
		t.Fatal("no round trip through a delayed link")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("round trip over a link delayed 150ms each way took %v", took)
	}

	// A reset ends the members' connections, not the clients'.
	n.heal()
	n.reset("a")
	for _, c := range []net.Conn{aToB, bToA} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(b[:]); !errors.Is(err, io.EOF) {
			t.Fatalf("read on a reset connection: %v, want EOF", err)
		}
	}
	if !roundTrip(client, 5*time.Second) {
		t.Fatal("a reset of a member's connections ended a client's")
	}
}

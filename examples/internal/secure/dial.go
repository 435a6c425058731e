package secure

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/metatree/metatree/internal/peerid"
)

// SourceDialer returns the dialer for a member's outgoing connections to
// other members when listen (the -listen flag) names a specific IP: the
// connections leave from that IP, as Consul's -bind makes them, so peers
// see traffic from the address the member binds. It returns nil when
// listen is empty, a host name, or an unspecified address (0.0.0.0, [::]):
// the kernel then picks the source as before.
func SourceDialer(listen string) *net.Dialer {
	if listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsUnspecified() {
		return nil
	}
	// The timeouts are http.DefaultTransport's.
	return &net.Dialer{
		LocalAddr: &net.TCPAddr{IP: ip.AsSlice(), Zone: ip.Zone()},
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
	}
}

// SourceTransport is the HTTP transport of a member's traffic to other
// members through d (SourceDialer), with files' client TLS: raft, forwarded
// requests, joins, images, heartbeats and demo fragments share it. Nil when
// d is nil: each part then keeps its own default client.
func SourceTransport(d DialFunc, files *peerid.Files) *http.Transport {
	if d == nil {
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = d
	tr.Proxy = nil // member traffic goes straight to the member
	tr.TLSClientConfig = ClientTLS(files)
	// Forwarded proposals and heartbeats are concurrent requests to a few
	// hosts: keep their connections for reuse rather than dialing per
	// request, as the journal's own client does.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 256
	tr.DisableCompression = true
	return tr
}

// DialFunc dials a connection to another member: a net.Dialer's
// DialContext, or an in-memory network's in tests.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

package secure

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSourceDialerDialsFromTheListenIP: connections leave from the IP of
// -listen, which is what a peer sees; without a specific IP there is no
// dialer of its own.
func TestSourceDialerDialsFromTheListenIP(t *testing.T) {
	for _, listen := range []string{"", "0.0.0.0:9000", "[::]:9000", "localhost:9000", "no-port"} {
		require.Nil(t, SourceDialer(listen), "%q", listen)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	d := SourceDialer("127.0.0.23:9000")
	require.NotNil(t, d)
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	c, err := d.DialContext(t.Context(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	from := <-accepted
	require.NotNil(t, from)
	require.Equal(t, "127.0.0.23", from.(*net.TCPAddr).IP.String())
	require.Nil(t, SourceTransport(nil, nil))
	require.NotNil(t, SourceTransport(d.DialContext, nil).DialContext)
}

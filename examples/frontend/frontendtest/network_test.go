package frontendtest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs an HTTP server answering "ok" on addr until the test ends.
func serve(t *testing.T, n *Network, addr string) {
	t.Helper()
	ln, err := n.Listen(addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok from "+addr)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
}

func get(ctx context.Context, tr *http.Transport, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestHTTPRunsUnchangedOverTheNetworkInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		serve(t, n, "a:1")
		tr := n.Transport("b:1")
		defer tr.CloseIdleConnections()
		body, err := get(t.Context(), tr, "http://a:1/")
		require.NoError(t, err)
		require.Equal(t, "ok from a:1", body)
	})
}

func TestDialToAnUnboundAddressIsRefused(t *testing.T) {
	n := NewNetwork()
	_, err := n.Dial(t.Context(), "b:1", "a:1")
	require.ErrorIs(t, err, ErrRefused)

	ln, err := n.Listen("a:1")
	require.NoError(t, err)
	_, err = n.Listen("a:1")
	require.Error(t, err, "a bound address is in use")
	require.NoError(t, ln.Close())
	_, err = ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = n.Dial(t.Context(), "b:1", "a:1")
	require.ErrorIs(t, err, ErrRefused)
}

func TestPartitionRefusesDialsAndClosesOpenConnectionsUntilHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		serve(t, n, "a:1")
		serve(t, n, "c:1")
		tr := n.Transport("b:1")
		defer tr.CloseIdleConnections()
		_, err := get(t.Context(), tr, "http://a:1/")
		require.NoError(t, err, "an idle keep-alive connection is now open")

		// An open connection on the cut link closes.
		ln, err := n.Listen("d:1")
		require.NoError(t, err)
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		c, err := n.Dial(t.Context(), "b:1", "d:1")
		require.NoError(t, err)
		s := <-accepted
		defer s.Close()

		n.Partition("b:1", "a:1", "d:1")
		_, err = c.Read(make([]byte, 1))
		require.Error(t, err, "the connection on the cut link is closed")

		_, err = get(t.Context(), tr, "http://a:1/")
		require.ErrorIs(t, err, ErrPartitioned)
		_, err = n.Dial(t.Context(), "a:1", "b:1")
		require.ErrorIs(t, err, ErrPartitioned, "a partition cuts both directions")
		body, err := get(t.Context(), tr, "http://c:1/")
		require.NoError(t, err, "links not named stay up")
		require.Equal(t, "ok from c:1", body)

		n.Heal()
		body, err = get(t.Context(), tr, "http://a:1/")
		require.NoError(t, err)
		require.Equal(t, "ok from a:1", body)
	})
}

func TestDialWaitsForAcceptUntilTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		ln, err := n.Listen("a:1")
		require.NoError(t, err)
		defer ln.Close()
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, err := n.Dial(ctx, "b:1", "a:1"); errc <- err }()
		synctest.Wait()
		cancel()
		err = <-errc
		require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	})
}

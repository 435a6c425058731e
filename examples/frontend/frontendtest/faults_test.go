package frontendtest

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCutOneWayRefusesDialsOneWayAndClosesOnlyThatWaysConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		serve(t, n, "a:1")
		serve(t, n, "b:1")
		fromA, fromB := n.Transport("a:1"), n.Transport("b:1")
		defer fromA.CloseIdleConnections()
		defer fromB.CloseIdleConnections()
		_, err := get(t.Context(), fromA, "http://b:1/")
		require.NoError(t, err, "an idle connection from a to b is open")

		n.CutOneWay("a:1", "b:1")
		_, err = get(t.Context(), fromA, "http://b:1/")
		require.ErrorIs(t, err, ErrPartitioned, "a reaches b no more")
		body, err := get(t.Context(), fromB, "http://a:1/")
		require.NoError(t, err, "b still reaches a and hears its answer")
		require.Equal(t, "ok from a:1", body)

		n.Heal()
		_, err = get(t.Context(), fromA, "http://b:1/")
		require.NoError(t, err)
	})
}

func TestSetDownCutsEveryLinkOfAnAddressUntilItIsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		serve(t, n, "a:1")
		serve(t, n, "b:1")
		fromA, fromC := n.Transport("a:1"), n.Transport("c:1")
		defer fromA.CloseIdleConnections()
		defer fromC.CloseIdleConnections()
		n.SetDown("a:1", true)
		_, err := get(t.Context(), fromA, "http://b:1/")
		require.ErrorIs(t, err, ErrPartitioned, "a down address dials nothing")
		_, err = get(t.Context(), fromC, "http://a:1/")
		require.ErrorIs(t, err, ErrPartitioned, "nothing reaches a down address")
		n.Heal()
		_, err = get(t.Context(), fromC, "http://a:1/")
		require.ErrorIs(t, err, ErrPartitioned, "Heal does not power an address back")
		n.SetDown("a:1", false)
		_, err = get(t.Context(), fromC, "http://a:1/")
		require.NoError(t, err)
	})
}

func TestFaultsDelayWritesInVirtualTimeAndResetConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		n.Seed(5)
		serve(t, n, "a:1")
		tr := n.Transport("b:1")
		defer tr.CloseIdleConnections()

		n.SetFaults("b:1", "a:1", Faults{Delay: 300 * time.Millisecond})
		n.SetFaults("a:1", "b:1", Faults{Delay: 200 * time.Millisecond})
		start := time.Now()
		_, err := get(t.Context(), tr, "http://a:1/")
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "the request and the answer each wait out their link's delay")

		n.SetFaults("b:1", "a:1", Faults{Reset: 1})
		_, err = get(t.Context(), tr, "http://a:1/")
		require.ErrorIs(t, err, ErrReset)

		n.ClearFaults()
		start = time.Now()
		_, err = get(t.Context(), tr, "http://a:1/")
		require.NoError(t, err)
		require.Less(t, time.Since(start), 100*time.Millisecond, "ClearFaults removes the delays")
	})
}

func TestAWriteWaitingOutADelayEndsWhenThePeerClosesTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		ln, err := n.Listen("a:1")
		require.NoError(t, err)
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- c
			}
		}()
		c, err := n.Dial(t.Context(), "b:1", "a:1")
		require.NoError(t, err)
		s := <-accepted
		n.SetFaults("b:1", "a:1", Faults{Delay: time.Hour})
		start := time.Now()
		errc := make(chan error, 1)
		go func() { _, err := c.Write([]byte("x")); errc <- err }()
		synctest.Wait()
		require.NoError(t, s.Close())
		require.Error(t, <-errc, "the write fails on the closed connection")
		require.Less(t, time.Since(start), time.Hour, "without waiting out the delay")
		require.NoError(t, c.Close())
	})
}

func TestLinkReportsEachDirectionsCutsAndFaults(t *testing.T) {
	n := NewNetwork()
	f, err := n.Link("a:1", "b:1")
	require.NoError(t, err)
	require.Zero(t, f)
	n.CutOneWay("a:1", "b:1")
	_, err = n.Link("a:1", "b:1")
	require.ErrorIs(t, err, ErrPartitioned, "the cut direction")
	_, err = n.Link("b:1", "a:1")
	require.NoError(t, err, "the other direction stays open")
	n.Heal()
	n.Partition("a:1", "b:1")
	_, err = n.Link("b:1", "a:1")
	require.ErrorIs(t, err, ErrPartitioned, "a partition cuts both directions")
	n.Heal()
	n.SetDown("b:1", true)
	_, err = n.Link("a:1", "b:1")
	require.ErrorIs(t, err, ErrPartitioned, "a down address")
	n.SetDown("b:1", false)
	slow := Faults{Delay: time.Millisecond}
	n.SetFaults("a:1", "b:1", slow)
	f, err = n.Link("a:1", "b:1")
	require.NoError(t, err)
	require.Equal(t, slow, f)
	f, _ = n.Link("b:1", "a:1")
	require.Zero(t, f, "faults are per direction")
}

package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
)

func TestDuplicateDeliversARequestAgainLaterOnAConnectionOfItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		defer n.Close()
		var mu sync.Mutex
		var bodies []string
		var remotes []string
		ln, err := n.Listen("a:1")
		require.NoError(t, err)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			remotes = append(remotes, r.RemoteAddr)
			mu.Unlock()
			_, _ = io.WriteString(w, "ok")
		})}
		served := make(chan struct{})
		go func() { defer close(served); _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close(); <-served }()

		n.SetFaults("b:1", "a:1", Faults{Duplicate: 1, Lag: time.Second})
		tr := n.Transport("b:1")
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		send := func(body string) {
			resp, err := client.Post("http://a:1/", "text/plain", strings.NewReader(body))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		send("first")
		n.SetFaults("b:1", "a:1", Faults{}) // later connections are not copied
		tr.CloseIdleConnections()
		send("second")
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []string{"first", "second"}, bodies, "the copy is not there before its lag")
		mu.Unlock()

		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"first", "second", "first"}, bodies, "the first request arrives again, after the second")
		require.Equal(t, "b:1", remotes[2], "the copy comes from the original's address")
		require.Equal(t, uint64(1), n.Copies())
	})
}

func TestACopyToACutLinkIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		defer n.Close()
		var mu sync.Mutex
		count := 0
		ln, err := n.Listen("a:1")
		require.NoError(t, err)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			count++
			mu.Unlock()
		})}
		served := make(chan struct{})
		go func() { defer close(served); _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close(); <-served }()

		n.SetFaults("b:1", "a:1", Faults{Duplicate: 1, Lag: time.Second})
		tr := n.Transport("b:1")
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Post("http://a:1/", "text/plain", strings.NewReader("x"))
		require.NoError(t, err)
		resp.Body.Close()
		n.Partition("a:1", "b:1")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, count, "the copy met the cut and was dropped")
	})
}

// A cluster whose every link copies requests (raft streams and the
// proposals in them, heartbeats to a worker), the copies late and out of
// order, applies each write once: a register written 1, 2, ... through
// every frontend in turn, each write retried with its key until it is
// acknowledged, ends on the last value on every frontend, and the
// replicas agree.
func TestAClusterWhoseLinksCopyRequestsLateAppliesEachWriteOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCluster(t, Options{Frontends: 3, Workers: 1, InMemory: true})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		_, err := c.Leader(ctx)
		require.NoError(t, err)
		addrs := []string{Addr(1), Addr(2), Addr(3), WorkerAddr(4)}
		for _, a := range addrs[:3] {
			for _, b := range addrs {
				if a != b {
					c.Network().SetFaults(a, b, Faults{Duplicate: 0.3, Lag: 700 * time.Millisecond, Reset: 0.05})
				}
			}
		}
		require.NoError(t, c.retry(ctx, "create the register", func() error {
			_, err := c.anyFrontend().Write(ctx, catalog.Batch{Ops: []catalog.Op{
				{Type: catalog.OpCreate, Path: "/r", Kind: "register", Cond: catalog.Cond{Absent: true}},
			}})
			if errors.Is(err, catalog.ErrExists) {
				return nil
			}
			return err
		}))
		const writes = 40
		for k := 1; k <= writes; k++ {
			b := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpUpdate, Path: "/r", Set: map[string]catalog.Value{"v": catalog.Int(int64(k))}}}}
			key := [16]byte{byte(k), 0x5e}
			f := c.Frontend(1 + k%3)
			data, err := b.Encode()
			require.NoError(t, err)
			require.NoError(t, c.retry(ctx, fmt.Sprintf("write %d", k), func() error {
				_, _, err := f.Journal().ProposeWithKey(ctx, key, data)
				return err
			}))
		}
		c.Network().ClearFaults()
		require.NotZero(t, c.Network().Copies())
		time.Sleep(5 * time.Second) // the copies still on their way land
		for i := 1; i <= 3; i++ {
			f := c.Frontend(i)
			require.NoError(t, f.Journal().ReadBarrier(ctx))
			n, ok := f.Tree().Get("/r")
			require.True(t, ok)
			require.Equal(t, catalog.Int(writes), n.Attrs["v"], "frontend %d: a copy of an older write applied again", i)
		}
	})
}

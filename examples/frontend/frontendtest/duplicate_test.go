package frontendtest

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
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

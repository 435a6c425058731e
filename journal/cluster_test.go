package journal

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/rafthttp"
)

func propose(t *testing.T, n *node, v string) uint64 {
	t.Helper()
	idx, val, err := n.j.Propose(ctxT(t, 5*time.Second), []byte(v))
	require.NoError(t, err, "propose %q through node %d", v, n.id)
	require.Equal(t, "ok:"+v, val)
	require.True(t, n.sm.has(v), "node %d applied its own write %q before returning", n.id, v)
	return idx
}

// A restart's Role: an observer configured as a follower is refused (only
// a promotion makes a voter), and a promoted observer restarted with the
// flags it joined with starts as the voter it is.
func TestRestartRole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(1, 1)
		c.waitLeader(1)
		n1, n2 := c.nodes[1], c.nodes[2]
		n2.closeJournal()
		require.ErrorIs(t, c.open(n2, func(cfg *Config) { cfg.Role = Follower }), ErrRoleMismatch)
		n2.sm = newMemSM()
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Role = Observer }))
		require.Equal(t, Observer, n2.j.Status().Role)

		require.NoError(t, n1.j.Promote(ctxT(t, 5*time.Second), 2))
		propose(t, n2, "as-follower")
		require.Equal(t, Follower, n2.j.Status().Role)
		n2.closeJournal()
		n2.sm = newMemSM()
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Role = Observer }))
		require.Equal(t, Follower, n2.j.Status().Role, "a promoted observer restarts as a voter")
		propose(t, n2, "after-restart")
	})
}

func TestStartupChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(2, 0)
		n1, n2 := c.nodes[1], c.nodes[2]

		// A second process on the same data dir fails at once.
		cfg := testConfig(n1)
		cfg.Transport = NewHTTPTransport(HTTPOptions{})
		_, err := Open(ctxT(t, 5*time.Second), cfg)
		require.ErrorIs(t, err, ErrLocked)

		// A wrong token cannot join.
		bad := c.listen(3)
		err = c.open(bad, func(cfg *Config) { cfg.Join = n1.addr; cfg.Token = "wrong" })
		require.ErrorIs(t, err, ErrClusterMismatch)
		// Nor can a node that expects another cluster id, and the helper
		// refuses it before admitting it.
		err = c.open(bad, func(cfg *Config) { cfg.Join = n1.addr; cfg.ClusterID = "other" })
		require.ErrorIs(t, err, ErrClusterMismatch)
		require.Len(t, n1.j.Status().Members, 2, "the refused node was not added")

		// Restart checks: cluster id, token and role must match the data dir.
		n2.closeJournal()
		require.ErrorIs(t, c.open(n2, func(cfg *Config) { cfg.ClusterID = "other" }), ErrClusterMismatch)
		require.ErrorIs(t, c.open(n2, func(cfg *Config) { cfg.Token = "other" }), ErrClusterMismatch)
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Role = Follower }))

		// Requests with a wrong cluster id or token are refused by the handler.
		for _, h := range []map[string]string{
			{rafthttp.HeaderCluster: "other", rafthttp.HeaderToken: "secret"},
			{rafthttp.HeaderCluster: n1.j.Status().ClusterID, rafthttp.HeaderToken: "nope"},
		} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+n1.addr+rafthttp.PathPropose, strings.NewReader(strings.Repeat("x", 40)))
			for k, v := range h {
				req.Header.Set(k, v)
			}
			req.Header.Set(rafthttp.HeaderFrom, "2")
			req.Header.Set(rafthttp.HeaderTo, "1")
			resp, err := c.client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
		}
		// A config error names the field.
		_, err = Open(ctxT(t, time.Second), Config{})
		require.ErrorContains(t, err, "ID must be non-zero")
	})
}

// A proposal of Config.MaxEntryBytes commits over the HTTP transport (its
// frames and its handler's body limit, served in process) through the
// leader and through a follower (the default frame limit carries it); one
// byte more fails at once with ErrTooLarge instead of an append the
// followers refuse forever.
func TestProposeEntrySizeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		// The context bounds the forwarded attempts, not their count: each
		// waits two election timeouts.
		c.start(3, 0, func(cfg *Config) { cfg.ForwardRetries = 1000 })
		leader := c.waitLeader()
		follower := leader%3 + 1
		limit := c.nodes[leader].j.cfg.MaxEntryBytes
		require.Equal(t, uint64(3<<19), limit, "the default")
		for i, id := range []uint64{leader, follower} {
			data := bytes.Repeat([]byte{'a' + byte(i)}, int(limit))
			_, _, err := c.nodes[id].j.Propose(ctxT(t, 10*time.Second), data)
			require.NoError(t, err, "node %d", id)
			for _, n := range c.nodes {
				require.NoError(t, n.j.ReadBarrier(ctxT(t, 10*time.Second)))
				require.True(t, n.sm.has(string(data)), "node %d applied the entry of node %d", n.id, id)
			}
		}
		_, _, err := c.nodes[follower].j.Propose(ctxT(t, 10*time.Second), make([]byte, limit+1))
		require.ErrorIs(t, err, ErrTooLarge)
		require.ErrorContains(t, err, "MaxEntryBytes")
		propose(t, c.nodes[leader], "after")
	})
}

// wrappedTransport is a host's Transport around the HTTP transport (one
// that counts or logs, say): the journal does not see the HTTPTransport.
type wrappedTransport struct{ *HTTPTransport }

// An HTTP transport wrapped in a Transport of the host's still stamps and
// checks the cluster's id and token: a node joining with one is admitted
// and replicates.
func TestWrappedHTTPTransportCarriesTheIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(1, 0)
		n1 := c.nodes[1]
		n2 := c.listen(2)
		require.NoError(t, c.open(n2, func(cfg *Config) {
			cfg.Join = n1.addr
			cfg.Transport = wrappedTransport{n2.tr}
			n2.mux.mu.Lock()
			n2.mux.h = n2.tr.Handler()
			n2.mux.mu.Unlock()
		}))
		// The journal serves no handler for a transport it does not know.
		n2.mux.mu.Lock()
		n2.mux.h = n2.tr.Handler()
		n2.mux.mu.Unlock()
		propose(t, n1, "through-the-wrapper")
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 10*time.Second)))
		require.True(t, n2.sm.has("through-the-wrapper"))
	})
}

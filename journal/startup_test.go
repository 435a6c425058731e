package journal_test

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/rafthttp"
	"github.com/metatree/metatree/journal/journaltest"
)

// A restart's Role: an observer configured as a follower is refused (only
// a promotion makes a voter), and a promoted observer restarted with the
// flags it joined with starts as the voter it is.
func TestRestartRole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newHTTPBubble(t, journaltest.Options{Voters: 1, Observers: 1})
		ctx := ctxFor(t, 30*time.Second)
		n1, n2 := c.Node(1), c.Node(2)
		c.stop(t, 2)
		require.ErrorIs(t, c.restart(t, 2, func(cfg *journal.Config) { cfg.Role = journal.Follower }), journal.ErrRoleMismatch)
		require.NoError(t, c.restart(t, 2, func(cfg *journal.Config) { cfg.Role = journal.Observer }))
		require.Equal(t, journal.Observer, n2.Journal().Status().Role)

		require.NoError(t, n1.Journal().Promote(ctxFor(t, 5*time.Second), 2))
		proposeVia(ctx, t, n2, "as-follower")
		require.Equal(t, journal.Follower, n2.Journal().Status().Role)
		c.stop(t, 2)
		require.NoError(t, c.restart(t, 2, func(cfg *journal.Config) { cfg.Role = journal.Observer }))
		require.Equal(t, journal.Follower, n2.Journal().Status().Role, "a promoted observer restarts as a voter")
		proposeVia(ctx, t, n2, "after-restart")
	})
}

func TestStartupChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// On disk: a second process opens the same data dir.
		c := newHTTPBubble(t, journaltest.Options{Voters: 2, OnDisk: true})
		n1 := c.Node(1)

		// A second process on the same data dir fails at once.
		_, err := journal.Open(ctxFor(t, 5*time.Second), journal.Config{
			ID: 1, Dir: n1.Dir, Addr: n1.Addr, Token: "secret", StateMachine: &journaltest.Recorder{},
			Transport: journal.NewHTTPTransport(journal.HTTPOptions{}),
		})
		require.ErrorIs(t, err, journal.ErrLocked)

		// A wrong token cannot join.
		_, err = c.add(t, journal.Follower, func(cfg *journal.Config) { cfg.Token = "wrong" })
		require.ErrorIs(t, err, journal.ErrClusterMismatch)
		// Nor can a node that expects another cluster id, and the helper
		// refuses it before admitting it.
		err = c.restart(t, 3, func(cfg *journal.Config) { cfg.ClusterID = "other" })
		require.ErrorIs(t, err, journal.ErrClusterMismatch)
		require.Len(t, n1.Journal().Status().Members, 2, "the refused node was not added")

		// Restart checks: cluster id, token and role must match the data dir.
		c.stop(t, 2)
		require.ErrorIs(t, c.restart(t, 2, func(cfg *journal.Config) { cfg.ClusterID = "other" }), journal.ErrClusterMismatch)
		require.ErrorIs(t, c.restart(t, 2, func(cfg *journal.Config) { cfg.Token = "other" }), journal.ErrClusterMismatch)
		require.NoError(t, c.restart(t, 2, func(cfg *journal.Config) { cfg.Role = journal.Follower }))

		// Requests with a wrong cluster id or token are refused by the handler.
		for _, h := range []map[string]string{
			{rafthttp.HeaderCluster: "other", rafthttp.HeaderToken: "secret"},
			{rafthttp.HeaderCluster: n1.Journal().Status().ClusterID, rafthttp.HeaderToken: "nope"},
		} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+n1.Addr+rafthttp.PathPropose, strings.NewReader(strings.Repeat("x", 40)))
			for k, v := range h {
				req.Header.Set(k, v)
			}
			req.Header.Set(rafthttp.HeaderFrom, "2")
			req.Header.Set(rafthttp.HeaderTo, "1")
			resp, err := c.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
		}
		// A config error names the field.
		_, err = journal.Open(ctxFor(t, time.Second), journal.Config{})
		require.ErrorContains(t, err, "ID must be non-zero")
	})
}

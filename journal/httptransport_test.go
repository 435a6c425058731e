package journal_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A proposal of Config.MaxEntryBytes commits over the HTTP transport (its
// frames and its handler's body limit, served in process) through the
// leader and through a follower (the default frame limit carries it); one
// byte more fails at once with ErrTooLarge instead of an append the
// followers refuse forever.
func TestProposeEntrySizeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The context bounds the forwarded attempts, not their count: each
		// waits two election timeouts.
		c := newHTTPBubble(t, journaltest.Options{Configure: func(cfg *journal.Config) { cfg.ForwardRetries = 1000 }})
		leader := c.leader(t)
		follower := c.Node(leader.ID%3 + 1)
		limit := leader.Journal().MaxEntryBytesForTest()
		require.Equal(t, uint64(3<<19), limit, "the default")
		for i, n := range []*journaltest.Node{leader, follower} {
			data := bytes.Repeat([]byte{'a' + byte(i)}, int(limit))
			_, _, err := n.Journal().Propose(ctxFor(t, 10*time.Second), data)
			require.NoError(t, err, "node %d", n.ID)
			for _, m := range c.Nodes() {
				require.NoError(t, m.Journal().ReadBarrier(ctxFor(t, 10*time.Second)))
				require.True(t, applied(m, string(data)), "node %d applied the entry of node %d", m.ID, n.ID)
			}
		}
		_, _, err := follower.Journal().Propose(ctxFor(t, 10*time.Second), make([]byte, limit+1))
		require.ErrorIs(t, err, journal.ErrTooLarge)
		require.ErrorContains(t, err, "MaxEntryBytes")
		proposeVia(ctxFor(t, 5*time.Second), t, leader, "after")
	})
}

// wrappedTransport is a host's Transport around the HTTP transport (one
// that counts or logs, say): the journal does not see the HTTPTransport.
type wrappedTransport struct{ *journal.HTTPTransport }

// An HTTP transport wrapped in a Transport of the host's still stamps and
// checks the cluster's id and token: a node joining with one is admitted
// and replicates. The journal serves no handler for a transport it does
// not know: the node serves the wrapper's (journaltest.HTTPInProcess).
func TestWrappedHTTPTransportCarriesTheIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newHTTPBubble(t, journaltest.Options{Voters: 1})
		n2, err := c.add(t, journal.Follower, func(cfg *journal.Config) {
			cfg.Transport = wrappedTransport{cfg.Transport.(*journal.HTTPTransport)}
		})
		require.NoError(t, err)
		proposeVia(ctxFor(t, 5*time.Second), t, c.Node(1), "through-the-wrapper")
		require.NoError(t, n2.Journal().ReadBarrier(ctxFor(t, 10*time.Second)))
		require.True(t, applied(n2, "through-the-wrapper"))
	})
}

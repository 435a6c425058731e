package journal

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func propose(t *testing.T, n *node, v string) uint64 {
	t.Helper()
	idx, val, err := n.j.Propose(ctxT(t, 5*time.Second), []byte(v))
	require.NoError(t, err, "propose %q through node %d", v, n.id)
	require.Equal(t, "ok:"+v, val)
	require.True(t, n.sm.has(v), "node %d applied its own write %q before returning", n.id, v)
	return idx
}

func TestStartupChecks(t *testing.T) {
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
	require.ErrorIs(t, c.open(n2, func(cfg *Config) { cfg.Role = Observer }), ErrRoleMismatch)
	require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Role = Follower }))

	// Requests with a wrong cluster id or token are refused by the handler.
	for _, h := range []map[string]string{
		{hdrCluster: "other", hdrToken: "secret"},
		{hdrCluster: n1.j.Status().ClusterID, hdrToken: "nope"},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+n1.addr+pathPropose, strings.NewReader(strings.Repeat("x", 40)))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		req.Header.Set(hdrFrom, "2")
		req.Header.Set(hdrTo, "1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}
	// A config error names the field.
	_, err = Open(ctxT(t, time.Second), Config{})
	require.ErrorContains(t, err, "ID must be non-zero")
	http.DefaultClient.CloseIdleConnections()
}

// awaitTicks waits until n's loop has ticked n more times.
func awaitTicks(t *testing.T, n *node, ticks int) {
	t.Helper()
	end := n.ticks.Load() + uint64(ticks)
	deadline := time.Now().Add(10 * time.Second)
	for n.ticks.Load() < end {
		require.True(t, time.Now().Before(deadline), "node %d ticked %d of %d times in 10s", n.id, ticks-int(end-n.ticks.Load()), ticks)
		tick := time.NewTimer(testTick)
		<-tick.C
	}
}

// A reachable node that is removed learns of it: either the append that
// commits its removal reaches it (the leader drops it from the transport
// only after sending that Ready's messages, and the transport delivers what
// it had queued), so it applies the change; or, when the leader's progress
// for it was paused at that moment (a probe in flight after a leadership
// change), its next message reaches a leader that applied the removal,
// which refuses it with ErrRemoved, and the node counts itself removed.
func TestRemovedNodeLearnsOfItsRemoval(t *testing.T) {
	c := newCluster(t)
	c.start(3, 3)
	leader := c.waitLeader()
	lj := c.nodes[leader].j
	propose(t, c.nodes[leader], "x")
	for id := uint64(4); id <= 6; id++ {
		require.NoError(t, lj.RemoveMember(ctxT(t, 5*time.Second), id, false))
		n := c.nodes[id]
		await(t, 5*time.Second, fmt.Sprintf("node %d learns of its removal", id), n.changed, func() bool { return n.j.Status().Removed })
		// No member answers it any more: it says so at once.
		_, _, err := n.j.Propose(ctxT(t, 5*time.Second), []byte("from-removed"))
		require.ErrorIs(t, err, ErrRemoved)
		require.ErrorIs(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)), ErrRemoved)
	}
	// A voter removing itself hears its own change applied, too.
	var self uint64
	for id := uint64(1); id <= 3; id++ {
		if id != leader {
			self = id
		}
	}
	// Forced: the removal check's verdict (the leader must count the other
	// follower reachable) is not what is shown here, and on real HTTP it
	// depends on how soon that follower answered the last heartbeat.
	require.NoError(t, c.nodes[self].j.RemoveMember(ctxT(t, 5*time.Second), self, true))
	require.True(t, c.nodes[self].j.Status().Removed)
}

// A leader that removes itself commits the change, learns of it, stops
// its raft clock (removed nodes neither campaign nor heartbeat), and the
// other voters elect a leader among themselves: writes and linearizable
// reads go on there, every member applied the write made before, and the
// removed node refuses both.
func TestLeaderRemovingItself(t *testing.T) {
	c := newCluster(t)
	c.start(3, 0)
	old := c.waitLeader()
	propose(t, c.nodes[old], "before")
	// Forced: what is shown here is the self-removal, not the removal
	// check's verdict (TestRemovalCheckSeesHealthyPeers), which on real
	// HTTP depends on how soon each follower answered the last heartbeat.
	require.NoError(t, c.nodes[old].j.RemoveMember(ctxT(t, 5*time.Second), old, true))
	gone := c.nodes[old]
	await(t, 5*time.Second, "the old leader learns of its removal", gone.changed, func() bool { return gone.j.Status().Removed })

	var rest []uint64
	for id := uint64(1); id <= 3; id++ {
		if id != old {
			rest = append(rest, id)
		}
	}
	leader := c.waitLeaderSeen(rest, rest...)
	require.NotEqual(t, old, leader)
	for _, id := range rest {
		n := c.nodes[id]
		propose(t, n, fmt.Sprintf("after-%d", id))
		require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, n.sm.has("before"), "node %d applied the write made before the removal", id)
		for _, m := range n.j.Status().Members {
			require.NotEqual(t, old, m.ID, "node %d still lists the removed leader", id)
		}
	}
	_, _, err := gone.j.Propose(ctxT(t, 5*time.Second), []byte("from-removed"))
	require.ErrorIs(t, err, ErrRemoved)
	require.ErrorIs(t, gone.j.ReadBarrier(ctxT(t, 5*time.Second)), ErrRemoved)
	camp, term := gone.j.campaigns.Load(), gone.j.Status().Term
	awaitTicks(t, gone, 3*testElectionTicks)
	require.Equal(t, camp, gone.j.campaigns.Load(), "campaigns after it learned of its removal")
	require.Equal(t, term, gone.j.Status().Term)
}

// removeObserverWhileCutOff starts three voters and observer 4, cuts the
// observer off, removes it and heals the cut. It returns the cluster, the
// observer and the voters' count of refused messages from removed nodes
// before the cut.
func removeObserverWhileCutOff(t *testing.T) (*cluster, *node, uint64) {
	c := newCluster(t)
	c.start(3, 1)
	leader := c.waitLeader()
	lj := c.nodes[leader].j
	propose(t, c.nodes[leader], "x")
	obs := c.nodes[4]
	require.NoError(t, obs.j.WaitApplied(ctxT(t, 5*time.Second), lj.Status().Applied))
	refused := c.refusedRemoved()
	c.partition(4)
	require.NoError(t, lj.RemoveMember(ctxT(t, 5*time.Second), 4, false))
	c.heal()
	return c, obs, refused
}

// refusedRemoved sums the messages from removed nodes that voters 1 to 3
// refused.
func (c *cluster) refusedRemoved() (n uint64) {
	for id := uint64(1); id <= 3; id++ {
		n += c.nodes[id].j.refusedRemoved.Load()
	}
	return n
}

// An observer removed while cut off hears nothing after the heal and, as
// a learner, sends nothing by itself; a linearizable read on it sends a
// ReadIndex to the member it takes for the leader, which refuses it, and
// the read fails with ErrRemoved.
func TestObserverRemovedWhileCutOffLearnsOnARead(t *testing.T) {
	_, obs, _ := removeObserverWhileCutOff(t)
	require.ErrorIs(t, obs.j.ReadBarrier(ctxT(t, 10*time.Second)), ErrRemoved)
	require.True(t, obs.j.Status().Removed)
}

// The same observer, asked nothing after the heal, learns of its removal
// from its own removal probe once its view goes stale (removalprobe.go):
// the member it takes for the leader refuses the probe.
func TestIdleObserverRemovedWhileCutOffLearnsFromItsProbe(t *testing.T) {
	c, obs, refused := removeObserverWhileCutOff(t)
	await(t, 20*time.Second, "the idle observer learns of its removal", obs.changed, func() bool { return obs.j.Status().Removed })
	require.Greater(t, c.refusedRemoved(), refused, "a member refused the probe")
	require.ErrorIs(t, obs.j.ReadBarrier(ctxT(t, 5*time.Second)), ErrRemoved)
}

// A proposal of Config.MaxEntryBytes commits over real HTTP through the
// leader and through a follower (the default frame limit carries it); one
// byte more fails at once with ErrTooLarge instead of an append the
// followers refuse forever.
func TestProposeEntrySizeLimit(t *testing.T) {
	c := newCluster(t)
	// The context bounds the forwarded attempts, not their count: each
	// waits two election timeouts of the test's short ticks, which an entry
	// of the largest size can outlast on a loaded machine under -race.
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
}

func TestIdempotentRetry(t *testing.T) {
	c := newCluster(t)
	c.start(3, 0)
	c.waitLeader()
	key := [16]byte{1, 2, 3}
	ctx := ctxT(t, 5*time.Second)
	i1, v1, err := c.nodes[2].j.ProposeWithKey(ctx, key, []byte("once"))
	require.NoError(t, err)
	require.Equal(t, "ok:once", v1)
	// The same key again, through another node: applied once, same index.
	i2, _, err := c.nodes[3].j.ProposeWithKey(ctx, key, []byte("once"))
	require.NoError(t, err)
	require.Equal(t, i1, i2)
	i3, v3, err := c.nodes[2].j.ProposeWithKey(ctx, key, []byte("once"))
	require.NoError(t, err)
	require.Equal(t, i1, i3)
	require.Equal(t, "ok:once", v3, "the proposer's node remembers the value")
	propose(t, c.nodes[1], "barrier")
	for id := uint64(1); id <= 3; id++ {
		n := 0
		for _, v := range c.nodes[id].sm.values() {
			if v == "once" {
				n++
			}
		}
		require.Equal(t, 1, n, "node %d applied the keyed entry once", id)
	}
}

// Several nodes joining through the same helper at once: raft takes one
// membership change at a time, the others wait their turn.
func TestConcurrentJoins(t *testing.T) {
	c := newCluster(t)
	n1 := c.listen(1)
	require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Bootstrap = true }))
	c.waitLeader(1)
	var joiners []*node
	for id := uint64(2); id <= 4; id++ {
		joiners = append(joiners, c.listen(id))
	}
	errs := make(chan error, len(joiners))
	for _, n := range joiners {
		go func() {
			errs <- c.open(n, func(cfg *Config) { cfg.Join = n1.addr })
		}()
	}
	for range joiners {
		require.NoError(t, <-errs)
	}
	require.Len(t, n1.j.Status().Members, 4)
	for _, n := range joiners {
		propose(t, n, fmt.Sprintf("from-%d", n.id))
	}
}

// A proposal forwarded inside raft's stream is admitted only with user
// entries: a membership change must go through HandleForward's checks, and
// only the leader journals its clock.
func TestForwardedProposalChecks(t *testing.T) {
	c := newCluster(t)
	c.start(3, 0)
	leader := c.waitLeader()
	from := leader%3 + 1
	ctx := ctxT(t, 5*time.Second)
	prop := func(e *raftpb.Entry) []*raftpb.Message {
		return []*raftpb.Message{{Type: raftpb.MsgProp.Enum(), From: new(from), To: new(leader), Entries: []*raftpb.Entry{e}}}
	}
	cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(leader)})
	require.NoError(t, err)
	for name, e := range map[string]*raftpb.Entry{
		"conf change": {Type: raftpb.EntryConfChange.Enum(), Data: cc},
		"timestamp":   {Data: encodeTimestamp(time.Now().UnixNano())},
		"garbage":     {Data: []byte{9, 9, 9}},
	} {
		err := c.nodes[leader].j.receive(ctx, prop(e))
		require.ErrorIs(t, err, ErrMalformed, name)
		require.Contains(t, err.Error(), "forwarded proposal", name)
	}
	key := [16]byte{7}
	require.NoError(t, c.nodes[leader].j.receive(ctx, prop(&raftpb.Entry{Data: encodeUser(key, []byte("forwarded"))})))
	propose(t, c.nodes[leader], "after")
	require.True(t, c.nodes[leader].sm.has("forwarded"), "a user entry forwarded in the stream is applied")
	require.Len(t, c.nodes[leader].j.Status().Members, 3, "no membership change slipped through")
}

// Once Propose returns, the node's applied index covers the entry: a
// checkpoint or WaitApplied right after a write sees it. Concurrent
// proposers make the applier's batches long, so a proposer woken early in
// a batch checks before the batch ends.
func TestAppliedCoversReturnedProposals(t *testing.T) {
	c := newCluster(t)
	c.start(3, 0)
	leader := c.waitLeader()
	follower := leader%3 + 1
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		n := c.nodes[leader]
		if g%4 == 3 {
			n = c.nodes[follower]
		}
		wg.Go(func() {
			for i := range 30 {
				idx, _, err := n.j.Propose(ctx, fmt.Appendf(nil, "g%d-%d", g, i))
				if err != nil {
					errs <- err
					return
				}
				if applied := n.j.Status().Applied; applied < idx {
					errs <- fmt.Errorf("node %d returned index %d with applied %d", n.id, idx, applied)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

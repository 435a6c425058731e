package journal_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// uncheckedTree is a catalog.Tree behind a state machine that does not
// check proposals: a node that proposes whatever it is given.
type uncheckedTree struct{ t *catalog.Tree }

func (u uncheckedTree) Apply(index uint64, data []byte) any { return u.t.Apply(index, data) }

// treeOf is node n's catalog tree.
func treeOf(n *journaltest.Node) *catalog.Tree {
	switch sm := n.StateMachine().(type) {
	case *catalog.Tree:
		return sm
	case uncheckedTree:
		return sm.t
	}
	return nil
}

// logged returns every user entry in node n's log, up to its applied
// index.
func logged(ctx context.Context, t *testing.T, n *journaltest.Node) [][]byte {
	t.Helper()
	j := n.Journal()
	first, err := j.FirstIndex()
	require.NoError(t, err)
	var out [][]byte
	require.NoError(t, j.ReadEntries(ctx, first-1, j.Status().Applied, func(_ uint64, data []byte) error {
		out = append(out, append([]byte(nil), data...))
		return nil
	}))
	return out
}

// requireHealthyWith checks that every node of c applies a real batch
// after the refused proposals: none halted, and none's log holds any of
// bad.
func requireHealthyWith(ctx context.Context, t *testing.T, c *journaltest.Cluster, via *journaltest.Node, bad ...[]byte) {
	t.Helper()
	data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/after", Kind: "dir"}}}.Encode()
	require.NoError(t, err)
	idx, v, err := via.Journal().Propose(ctx, data)
	require.NoError(t, err)
	require.NoError(t, v.(*catalog.Result).Err)
	require.NoError(t, c.WaitApplied(ctx, idx), "every node applies past the refused proposals")
	for _, n := range c.Running() {
		require.NoError(t, n.Journal().Status().Err, "node %d", n.ID)
		_, ok := treeOf(n).Get("/after")
		require.True(t, ok, "node %d applied the batch", n.ID)
		for _, e := range logged(ctx, t, n) {
			for _, b := range bad {
				require.NotEqual(t, b, e, "node %d's log holds a refused proposal", n.ID)
			}
		}
	}
}

// forwardFromProbe forwards req to node to from a transport of its own on
// the cluster's network, as a member's transport does.
func forwardFromProbe(ctx context.Context, t *testing.T, c *journaltest.Cluster, to uint64, req *journal.ForwardRequest) (*journal.ForwardResponse, error) {
	t.Helper()
	tr := c.Net.Transport("probe")
	require.NoError(t, tr.Start(99, nopReceiver{}))
	defer func() { require.NoError(t, tr.Close()) }()
	tr.SetPeer(to, c.Node(to).Addr)
	return tr.Forward(ctx, to, req)
}

// nopReceiver is a transport's Receiver that takes nothing in.
type nopReceiver struct{}

func (nopReceiver) Receive(context.Context, []*raftpb.Message) error { return nil }
func (nopReceiver) HandleForward(context.Context, *journal.ForwardRequest) (*journal.ForwardResponse, error) {
	return nil, journal.ErrNotLeader
}
func (nopReceiver) HandleJoin(context.Context, *journal.JoinRequest) (*journal.JoinResponse, error) {
	return nil, journal.ErrNotLeader
}
func (nopReceiver) ReportUnreachable(uint64)    {}
func (nopReceiver) ReportRemoved(uint64)        {}
func (nopReceiver) ReportSnapshot(uint64, bool) {}

// Bytes that are not a catalog batch (the "hello" a first program writes,
// a truncated batch) are refused at Propose, on the leader and on a
// follower alike, with ErrInvalidProposal naming what is wrong; nothing
// reaches the log, and no replica halts.
func TestProposeRefusesBytesTheStateMachineCannotRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(uint64) journal.StateMachine { return catalog.New() },
		})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		hello, truncated := []byte("hello"), []byte{catalog.BatchV1, 1, 1}
		for _, id := range []uint64{leader, follower} {
			j := c.Node(id).Journal()
			_, _, err := j.Propose(ctx, hello)
			require.ErrorIs(t, err, journal.ErrInvalidProposal, "node %d", id)
			require.ErrorIs(t, err, catalog.ErrUnknownVersion, "node %d", id)
			require.ErrorContains(t, err, "batch version 104")
			_, _, err = j.Propose(ctx, truncated)
			require.ErrorIs(t, err, journal.ErrInvalidProposal, "node %d", id)
			require.ErrorIs(t, err, catalog.ErrMalformed, "node %d", id)
		}
		// A proposal forwarded through the transport is checked on the
		// leader.
		_, err = forwardFromProbe(ctx, t, c, leader, &journal.ForwardRequest{Kind: journal.ForwardData, Key: [16]byte{1}, Data: hello})
		require.ErrorIs(t, err, journal.ErrInvalidProposal)
		requireHealthyWith(ctx, t, c, c.Node(follower), hello, truncated)
	})
}

// A node whose state machine checks nothing passes "hello" on to the
// leader in raft's message stream; the leader checks it again and drops
// it: nothing reaches the log, no replica halts, and the proposer's
// Propose fails (the leader's refusal does not reach it, so the failure
// may say the outcome is unknown, never that the write applied).
func TestLeaderRefusesAForwardedProposalItsStateMachineCannotRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const proposer = 3
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(id uint64) journal.StateMachine {
				if id == proposer {
					return uncheckedTree{catalog.New()}
				}
				return catalog.New()
			},
		})
		ctx := ctxFor(t, 60*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		if leader == proposer {
			require.NoError(t, c.Node(proposer).Journal().TransferLeadership(ctx, 1))
			_, err = c.WaitNewLeader(ctx, proposer)
			require.NoError(t, err)
		}
		hello := []byte("hello")
		_, _, err = c.Node(proposer).Journal().Propose(ctx, hello)
		require.Error(t, err)
		require.NoError(t, ctx.Err(), "Propose ended before its context")
		requireHealthyWith(ctx, t, c, c.Node(proposer), hello)
	})
}

// In a cluster whose state machines check no proposals, "hello" reaches
// the log and every replica halts at it. The halt names what the node
// knows: the index, the version byte found, the versions this binary
// reads, and that no binary reads an entry no version wrote.
func TestHaltOnUncheckedRawBytesSaysWhatItKnows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(uint64) journal.StateMachine { return uncheckedTree{catalog.New()} },
		})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		_, _, err = c.Node(leader).Journal().Propose(ctx, []byte("hello"))
		require.ErrorIs(t, err, journal.ErrHalted)
		var he *journal.HaltError
		require.ErrorAs(t, err, &he)
		for _, n := range c.Running() {
			err := n.Journal().WaitApplied(ctx, he.Index)
			require.ErrorIs(t, err, journal.ErrHalted, "node %d", n.ID)
			for _, want := range []string{
				fmt.Sprintf("halted at index %d", he.Index),
				fmt.Sprintf("batch version 104 (this code reads 1 to %d)", catalog.NewestBatchVersion),
				"a restart with a binary that reads this entry resumes there; no binary reads one that no version wrote",
			} {
				require.ErrorContains(t, err, want, "node %d", n.ID)
			}
		}
	})
}

var _ journal.ProposalChecker = (*catalog.Tree)(nil)

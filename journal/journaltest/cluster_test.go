package journaltest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func values(n *journaltest.Node) []string {
	var out []string
	for _, a := range n.StateMachine().(*journaltest.Recorder).Applied() {
		out = append(out, string(a.Data))
	}
	return out
}

func TestClusterPartitionAndHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1, Seed: 7})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		for _, n := range c.Running() { // writes through every node, observer included
			_, _, err := n.Journal().Propose(ctx, fmt.Appendf(nil, "via%d", n.ID))
			require.NoError(t, err, "propose through node %d", n.ID)
		}

		c.Net.Isolate(leader)
		newLeader, err := c.WaitNewLeader(ctx, leader)
		require.NoError(t, err)
		idx, _, err := c.Node(newLeader).Journal().Propose(ctx, []byte("during"))
		require.NoError(t, err)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _, err = c.Node(leader).Journal().Propose(short, []byte("lost"))
		cancel()
		require.Error(t, err, "the minority side cannot commit")

		c.Net.Heal()
		require.NoError(t, c.WaitApplied(ctx, idx))
		want := values(c.Node(newLeader))
		for _, n := range c.Running() {
			require.NoError(t, n.Journal().ReadBarrier(ctx))
			require.Equal(t, want[:len(values(n))], values(n), "node %d diverged", n.ID)
			require.Contains(t, values(n), "during")
		}
	})
}

func TestClusterCrashAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		var follower uint64 = 1
		if leader == 1 {
			follower = 2
		}
		for i := range 5 {
			_, _, err := c.Node(leader).Journal().Propose(ctx, fmt.Appendf(nil, "a%d", i))
			require.NoError(t, err)
		}
		require.NoError(t, c.Crash(follower))
		last := uint64(0)
		for i := range 5 {
			last, _, err = c.Node(leader).Journal().Propose(ctx, fmt.Appendf(nil, "b%d", i))
			require.NoError(t, err, "two of three voters still commit")
		}
		require.NoError(t, c.Restart(ctx, follower))
		require.NoError(t, c.Node(follower).Journal().WaitApplied(ctx, last))
		require.Equal(t, values(c.Node(leader)), values(c.Node(follower)), "replayed and caught up")

		// A crashed leader: acknowledged writes survive on the others.
		require.NoError(t, c.Crash(leader))
		_, err = c.WaitNewLeader(ctx, leader)
		require.NoError(t, err)
		require.NoError(t, c.Restart(ctx, leader))
		require.NoError(t, c.Node(leader).Journal().WaitApplied(ctx, last))
		require.Contains(t, values(c.Node(leader)), "b4")
	})
}

func TestClusterDropsAndDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Seed: 3})
		ctx := ctxFor(t, 30*time.Second)
		c.Net.Drop(0, 0, 0.1)
		c.Net.Delay(0, 0, time.Millisecond, 2*time.Millisecond)
		for i := range 20 {
			n := c.Nodes()[i%3]
			var err error
			for attempt := 0; attempt < 5; attempt++ { // drops may cost an election
				_, _, err = n.Journal().Propose(ctx, fmt.Appendf(nil, "d%d", i))
				if err == nil || !errors.Is(err, journal.ErrNoLeader) {
					break
				}
			}
			require.NoError(t, err)
		}
		_, dropped := c.Net.Stats()
		require.NotZero(t, dropped)
	})
}

// A follower's proposal travels to the leader inside raft's message stream,
// where nobody acknowledges it. When the network loses it, the proposer
// re-proposes with the same key once no apply came in time, and the write is
// applied exactly once.
func TestForwardedProposalLostIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Seed: 5})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		_, _, err = c.Node(follower).Journal().Propose(ctx, []byte("warm-up"))
		require.NoError(t, err)

		// Everything the follower sends the leader is lost; the leader and the
		// third voter still make a quorum.
		c.Net.Drop(follower, leader, 1)
		_, before := c.Net.Stats()
		done := make(chan error, 1)
		go func() {
			_, _, err := c.Node(follower).Journal().Propose(ctx, []byte("once"))
			done <- err
		}()
		// The follower keeps answering the leader's heartbeats: once a few of
		// its messages sent after the proposal were dropped, so was the
		// proposal.
		for {
			_, dropped := c.Net.Stats()
			if dropped >= before+20 {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("the proposal returned (%v) while its messages were being dropped", err)
			case <-time.After(10 * time.Millisecond): // one raft tick of virtual time
			}
		}
		require.NotContains(t, values(c.Node(leader)), "once", "the leader never saw the proposal")
		c.Net.Heal()
		require.NoError(t, <-done)
		count := 0
		for _, v := range values(c.Node(follower)) {
			if v == "once" {
				count++
			}
		}
		require.Equal(t, 1, count, "applied exactly once")
	})
}

// Leader counts the voters of the membership the leader applied, not the
// roles the nodes were added with: after two of three voters are removed
// and stopped, the one left leads alone.
func TestClusterLeaderAfterRemovals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		lj := c.Node(leader).Journal()
		for _, n := range c.Nodes() {
			if n.ID == leader {
				continue
			}
			// Forced: right after the cluster formed the leader may not
			// count the other follower as recently active yet.
			require.NoError(t, lj.RemoveMember(ctx, n.ID, true), "remove node %d", n.ID)
		}
		for _, n := range c.Nodes() {
			if n.ID != leader {
				require.NoError(t, c.Stop(n.ID))
			}
		}
		require.Len(t, lj.Status().Members, 1)
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := c.WaitLeader(short)
		require.NoError(t, err, "the last voter leads a membership of one")
		require.Equal(t, leader, got)
	})
}

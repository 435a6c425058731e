package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// gatedSM is a Recorder whose Apply of the entry hold waits until open is
// closed, and tells held when it starts waiting.
type gatedSM struct {
	journaltest.Recorder
	hold string
	held chan struct{}
	open chan struct{}
}

func (s *gatedSM) Apply(index uint64, data []byte) any {
	if string(data) == s.hold {
		select {
		case s.held <- struct{}{}:
		default:
		}
		<-s.open
	}
	return s.Recorder.Apply(index, data)
}

// A follower's proposal reaches the leader in raft's message stream and
// applies there, while the follower's own applier is held up: the follower
// re-proposes it, the copies are duplicates, and the follower runs out of
// attempts before it applies anything. Whatever Propose returns then is
// either the write's result or ErrOutcomeUnknown, never a definite failure
// of a write that applied (once, on every node).
func TestProposeNeverReportsAnAppliedForwardedWriteAsFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := &gatedSM{hold: "once", held: make(chan struct{}, 1), open: make(chan struct{})}
		opened := false
		openGate := func() {
			if !opened {
				opened = true
				close(gate.open)
			}
		}
		defer openGate()
		const follower = 2
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters: 3,
			NewStateMachine: func(id uint64) journal.StateMachine {
				if id == follower {
					return gate
				}
				return &journaltest.Recorder{}
			},
		})
		ctx := ctxFor(t, 60*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		if leader == follower {
			require.NoError(t, c.Node(leader).Journal().TransferLeadership(ctx, 1))
			leader, err = c.WaitNewLeader(ctx, follower)
			require.NoError(t, err)
		}

		type result struct {
			index uint64
			err   error
		}
		done := make(chan result, 1)
		go func() {
			idx, _, err := c.Node(follower).Journal().Propose(ctx, []byte("once"))
			done <- result{idx, err}
		}()
		<-gate.held // the write committed; the follower's applier holds it
		// Every attempt the follower makes runs out meanwhile (five of two
		// election timeouts each).
		var r result
		returned := false
		select {
		case r = <-done:
			returned = true
		case <-time.After(20 * time.Second):
		}
		openGate()
		if !returned {
			r = <-done
		}
		if r.err != nil {
			require.ErrorIs(t, r.err, journal.ErrOutcomeUnknown,
				"Propose failed definitely (%v) for a write that applied", r.err)
		}

		last, _, err := c.Node(leader).Journal().Propose(ctx, []byte("barrier"))
		require.NoError(t, err)
		require.NoError(t, c.WaitApplied(ctx, last))
		for _, n := range c.Running() {
			count := 0
			for _, v := range values(n) {
				if v == "once" {
					count++
				}
			}
			require.Equal(t, 1, count, "node %d applied the write once", n.ID)
		}
	})
}

// A follower's proposal reaches the leader and applies, but nothing the
// leader sends the follower arrives: the follower never hears of the
// apply and runs out of attempts. The write may have applied (it did), so
// Propose answers ErrOutcomeUnknown, not a failure; once the network heals,
// every node holds the write once.
func TestProposeWhoseForwardedCopyAppliedUnheardIsOutcomeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, 60*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		_, _, err = c.Node(follower).Journal().Propose(ctx, []byte("warm-up"))
		require.NoError(t, err)

		c.Net.Drop(leader, follower, 1)
		_, _, err = c.Node(follower).Journal().Propose(ctx, []byte("once"))
		require.ErrorIs(t, err, journal.ErrOutcomeUnknown)
		require.NoError(t, ctx.Err(), "Propose ended on its own, before its context")
		require.Contains(t, values(c.Node(leader)), "once", "the write applied on the leader")

		c.Net.Heal()
		last, _, err := c.Node(leader).Journal().Propose(ctx, []byte("barrier"))
		require.NoError(t, err)
		require.NoError(t, c.WaitApplied(ctx, last))
		for _, n := range c.Running() {
			count := 0
			for _, v := range values(n) {
				if v == "once" {
					count++
				}
			}
			require.Equal(t, 1, count, "node %d applied the write once", n.ID)
		}
	})
}

// values is what node n's state machine (a journaltest.Recorder or one
// that embeds it) applied, as strings.
func values(n *journaltest.Node) []string {
	var out []string
	for _, a := range n.StateMachine().(interface{ Applied() []journaltest.Applied }).Applied() {
		out = append(out, string(a.Data))
	}
	return out
}

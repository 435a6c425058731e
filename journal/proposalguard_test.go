package journal_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

type allowKey struct{}

var errGuarded = errors.New("guarded")

// TestProposalGuardRefusesWithTheProposersContext: the guard sees the
// proposer's context on a leader and on a follower alike; what it refuses
// fails Propose and ProposeWithKey with ErrInvalidProposal wrapping its
// error and never reaches the log, and what it admits is applied.
func TestProposalGuardRefusesWithTheProposersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{
			Configure: func(cfg *journal.Config) {
				cfg.ProposalGuard = func(ctx context.Context, data []byte) error {
					if ctx.Value(allowKey{}) == nil {
						return errGuarded
					}
					return nil
				}
			},
		})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		for _, id := range []uint64{leader, follower} {
			// Every entry so far applied on every node, so that what this
			// node applies next can only come from the proposals below.
			require.NoError(t, c.WaitApplied(ctx, c.Node(leader).Journal().Status().Committed))
			j := c.Node(id).Journal()
			before := j.Status().Applied
			_, _, err := j.Propose(ctx, []byte("refused"))
			require.ErrorIs(t, err, journal.ErrInvalidProposal, "node %d", id)
			require.ErrorIs(t, err, errGuarded, "node %d", id)
			_, _, err = j.ProposeWithKey(ctx, [16]byte{byte(id)}, []byte("refused"))
			require.ErrorIs(t, err, errGuarded, "node %d", id)
			require.Equal(t, before, j.Status().Applied, "node %d: nothing entered the log", id)

			idx, _, err := j.Propose(context.WithValue(ctx, allowKey{}, true), []byte("admitted"))
			require.NoError(t, err, "node %d", id)
			require.Greater(t, idx, before)
		}
	})
}

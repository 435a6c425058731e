package readround

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadRoundsHandOff drives the round state alone: callers ride a round
// until it is sealed for sending; the round that waited behind an answered
// one is handed to its callers, and the callers the answer released ride
// it while it gathers instead of waiting for the one after; a round left
// unanswered is sent again at the raft loop's ticks, and a round no caller
// sends is sent by the loop, sealed, so that no caller rides a round sent
// before it arrived.
func TestReadRoundsHandOff(t *testing.T) {
	const resend = 4
	var rr Rounds
	rr.NewRun()
	// ride joins a caller that must not send, and returns its round.
	ride := func() *Round {
		r, send := rr.Join()
		require.False(t, send)
		return r
	}
	// ticks runs n raft ticks with a leader known and returns what the
	// loop had to send.
	ticks := func(n int) (out [][]byte) {
		for range n {
			if ctx := rr.Tick(true, resend); ctx != nil {
				out = append(out, ctx)
			}
		}
		return out
	}
	a, send := rr.Join()
	require.True(t, send, "the first caller sends")
	require.Same(t, a, ride(), "a caller arriving while the round gathers rides it")
	require.True(t, rr.Seal(a), "a sealed round still to send")
	rr.MarkSent(a)
	next := ride()
	require.NotSame(t, a, next, "after the seal, callers wait for the next round")

	rr.Answered(a.ctx, 7)
	<-a.done
	require.Equal(t, uint64(7), a.index)
	select {
	case <-next.turn:
	default:
		t.Fatal("the waiting round was not handed to its callers")
	}
	again, send := rr.Join()
	require.False(t, send)
	require.Same(t, next, again, "a released caller rides the handed-off round while it gathers")
	require.True(t, rr.Seal(next))
	rr.MarkSent(next)
	after := ride()
	require.NotSame(t, next, after)
	require.Equal(t, uint64(2), rr.sent.Load(), "a, then the hand-off of next")

	// next goes unanswered: the loop sends it again once resend ticks
	// passed, and again after as many more; never without a leader.
	rr.Answered(a.ctx, 9) // a late answer to a: ignored
	require.Nil(t, rr.Tick(false, resend), "no leader known: nothing to send")
	require.Equal(t, [][]byte{next.ctx}, ticks(resend-1))
	require.Equal(t, [][]byte{next.ctx}, ticks(resend))
	require.Same(t, after, ride(), "callers still ride the round after")
	rr.Answered(next.ctx, 11)
	<-next.done
	select {
	case <-after.turn:
	default:
		t.Fatal("the round after was not handed off")
	}
	require.Equal(t, 2, rr.lastRiders, "next carried its own caller and a released one")

	// No caller takes the hand-off of after (they all left): the loop
	// sends it, sealed, within UnsentTicks; a caller taking the turn
	// afterwards does not send it again.
	require.Equal(t, [][]byte{after.ctx}, ticks(UnsentTicks))
	require.NotSame(t, after, ride(), "no caller rides a round the loop sent")
	require.False(t, rr.Seal(after), "a round the loop sent needs no sender")

	// A sender that could not send passes its turn on, without blocking
	// when a turn is already there: one turn at most.
	after.PassTurn()
	after.PassTurn()
	<-after.turn
	select {
	case <-after.turn:
		t.Fatal("two turns for one round")
	default:
	}
}

// Every run of a node numbers its rounds from 1, under a prefix of its own:
// the first rounds of two runs have different request contexts, and the
// answer to one does not release the other.
func TestReadRoundsOfTwoRunsNeverShareAnAnswer(t *testing.T) {
	var before, after Rounds
	before.NewRun()
	after.NewRun()
	old, send := before.Join()
	require.True(t, send)
	cur, send := after.Join()
	require.True(t, send)
	require.Len(t, cur.ctx, CtxLen)
	require.NotEqual(t, old.ctx, cur.ctx, "round 1 of two runs")

	after.Answered(old.ctx, 6)
	select {
	case <-cur.done:
		t.Fatal("the answer to the previous run's round 1 released this run's round 1")
	default:
	}
	after.Answered([]byte("probe"), 6) // the journal's removal probe
	select {
	case <-cur.done:
		t.Fatal("the answer to a removal probe released a round")
	default:
	}
	after.Answered(cur.ctx, 7)
	<-cur.done
	require.Equal(t, uint64(7), cur.index)
}

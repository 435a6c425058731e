package journal

import (
	"context"
	"runtime"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/readround"
)

// Linearizable reads share ReadIndex rounds (journal/internal/readround
// holds the rounds' state and documents the scheme): the callers of
// ReadBarrier join, gather, seal and send rounds, and the raft loop
// answers, hands off and resends them.

// readResendTicks is how long the raft loop waits for the answer to a
// round it sent before it sends it again: two heartbeat intervals.
func (j *Journal) readResendTicks() uint64 {
	return max(2, 2*uint64(j.cfg.HeartbeatTicks))
}

// ReadBarrier makes the next local reads linearizable: it learns the
// leader's commit index through a ReadIndex issued after the call began
// (raft ReadIndex; works on followers and observers), shared with the
// concurrent callers, and waits until this node has applied it. A round
// that goes unanswered (a lost message, no leader) is sent again every two
// heartbeat intervals once a leader is known, until ctx ends (the error
// then wraps ErrNoLeader if no leader is known). A node that knows it was
// removed fails with ErrRemoved: no member answers it any more; one whose
// corruption alarm is raised, with ErrCorrupt (a *CorruptError). A member
// that restarted, or installed an image, also waits for the consistency
// check at start to confirm its state (see Config.CheckInterval).
func (j *Journal) ReadBarrier(ctx context.Context) error {
	defer j.observeReadBarrier(j.cfg.Clock.Now())
	if err := j.removedErr(); err != nil {
		return operr.Errorf("journal: read barrier: %w", err)
	}
	if c := j.corruptErr(); c != nil {
		return operr.Errorf("journal: read barrier: %w", c)
	}
	if ctx.Err() != nil {
		// Joining would only add a caller that never waits.
		return operr.Errorf("journal: read barrier: %w", j.ctxErr(ctx, nil))
	}
	r, send := j.rounds.Join()
	// A removal is learnt from a refused message, without waking the
	// callers: they look every election timeout.
	removal, stop := j.cfg.Clock.NewTicker(j.electionTimeout())
	defer stop()
	for {
		if send {
			send = false
			if !j.gatherRound(r) {
				continue // sent by the raft loop meanwhile
			}
			if err := j.sendRound(ctx, r); err != nil {
				r.PassTurn()
				return operr.Errorf("journal: read barrier: %w", err)
			}
		}
		select {
		case <-r.Done():
			if err := j.WaitApplied(ctx, r.Index()); err != nil {
				return err
			}
			return j.waitChecked(ctx)
		case <-r.Turn():
			send = true // the raft loop handed the round's sending to this caller
		case <-removal:
			if err := j.removedErr(); err != nil {
				return operr.Errorf("journal: read barrier: %w", err)
			}
		case <-ctx.Done():
			return operr.Errorf("journal: read barrier: %w", j.ctxErr(ctx, nil))
		case <-j.done:
			return ErrClosed
		case <-j.loopDead:
			return j.loopErr()
		}
	}
}

// gatherYields bounds the yields of gatherRound.
const gatherYields = 4

// gatherRound lets the callers runnable now join round r before its sender
// seals and sends it: it yields while each yield brings more of them. The
// callers a round releases call again at once, and without it the first
// of them would send a round alone and the rest would wait for the next.
// While rounds have one caller each, it sends at once. It reports whether
// r still needs sending (seal).
func (j *Journal) gatherRound(r *readround.Round) bool {
	seen, busy := j.rounds.Riders(r)
	for i := 0; busy && i < gatherYields; i++ {
		runtime.Gosched()
		n, _ := j.rounds.Riders(r)
		if n == seen {
			break
		}
		seen = n
	}
	return j.rounds.Seal(r)
}

// sendRound hands round r's ReadIndex to the raft loop. The round stays in
// flight when ctx ends first: another caller, or the raft loop at its
// ticks, sends it.
func (j *Journal) sendRound(ctx context.Context, r *readround.Round) error {
	return j.do(ctx, func() {
		j.loop.rn.ReadIndex(r.Ctx())
		j.rounds.MarkSent(r)
	})
}

// A ReadIndex answer must be at least every write acknowledged before the
// request; raft's answer is its leader's commit index. A leader's commit
// index can lag such writes when it takes the lead, and raft's remedy is
// to answer no ReadIndex before the leader has committed an entry of its
// own term. But a leader that is the only voter answers at once, with the
// commit index it restarted with; and a commit-only HardState is written
// without an fsync (raft's MustSync: a quorum can rebuild it), so after a
// power cut that index can be below writes the node applied and
// acknowledged, which nothing but the node's own next commit rebuilds. So
// a leader raises every answer it gives, its own rounds' and those it
// sends to a follower or an observer, to at least readFloor, its last
// index when it took the lead: every write acknowledged before then is at
// or below it, and every entry of a leader's log commits while it leads,
// so the answer waits for nothing that does not come. Once the leader has
// committed an entry of its term the raise changes nothing: raft's answers
// are then at least the floor. Syncing every commit-only HardState instead
// would cost an fsync a write.

// readStates releases the rounds raft answered in a Ready, each at least
// at floor (the readFloor of the leadership that answered it; 0 for the
// answers of another leader), and hands the next round to its callers, on
// the raft loop.
func (j *Journal) readStates(states []raft.ReadState, floor uint64) {
	for _, rs := range states {
		j.rounds.Answered(rs.RequestCtx, max(rs.Index, floor))
	}
}

// raiseReadIndex raises a ReadIndex answer to another node to at least
// floor.
func raiseReadIndex(m *raftpb.Message, floor uint64) {
	if m.GetIndex() < floor {
		m.Index = new(floor)
	}
}

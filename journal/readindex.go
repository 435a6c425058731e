package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
)

// Linearizable reads share ReadIndex rounds, as etcd's server does in its
// linearizableReadLoop: at most one ReadIndex is in flight per node, and the
// ReadBarrier calls that arrive while it is answer all ride the next one. A
// caller never rides a round sent before it arrived (the leader's answer
// would not cover writes acknowledged in between), so a round takes the
// callers that arrive until it is sent, and no more. Under load each
// caller waits for at most the round in flight plus its own, and the node
// sends one ReadIndex (one heartbeat round on the leader) for all of them.
//
// No goroutine runs the rounds. The caller that finds none in flight
// gathers one: it yields while the callers runnable now join it, then
// seals and sends it through the raft loop. When a round's ReadState
// arrives, the raft loop releases its callers and, if callers wait for the
// next round, hands that round to one of them to gather and send in the
// same way. The callers it just released join that round while it
// gathers, instead of waiting for the one after: sent straight from the
// raft loop, the next round would leave them behind, and under a steady
// load the callers would split into two groups whose rounds alternate,
// each caller waiting two rounds (BenchmarkReadBarrier's reads/round).
//
// A sender whose context ends before the raft loop takes its round passes
// the sending on to another caller of the round. The raft loop keeps the
// round in flight moving at its ticks (readRounds.tick), so that a lost or
// abandoned round never holds back the callers of the next one, whose
// deadlines may all be shorter than any wait for a caller of its own: a
// round no caller sent within readUnsentTicks it sends itself, and a sent
// round left unanswered for readResendTicks (a lost request or answer, a
// leader that changed) it sends again under the same request context,
// while a leader is known. The answer to any copy releases the round, and
// the others match nothing.

// A round's request context is the run's prefix, drawn at random at Open,
// and the round's number in the run. An answer releases a round only if it
// carries the round's whole context: an answer to a round of an earlier run
// of this node (delayed on the network, or confirmed by the leader after
// the restart) names an index from before writes acknowledged meanwhile,
// and round numbers start again at 1 in every run. etcd's request ids are
// unique across restarts in the same way (idutil.Generator: member id and
// start time).

// readRound is one ReadIndex request and the callers riding it.
type readRound struct {
	ctx  []byte        // the ReadIndex request context (readCtxLen bytes)
	done chan struct{} // closed when index is set
	// turn holds the hand-off of the round's sending, for one of its
	// callers to take: put there by the raft loop, or by a sender that
	// could not send (passTurn).
	turn   chan struct{}
	index  uint64 // the answer: the leader's commit index as of the request, or its readFloor
	riders int    // the callers that joined it; guarded by readRounds.mu
	// The round's sending, guarded by readRounds.mu: whether it was sent,
	// the raft tick (readRounds.ticks) it was last sent at, or, while
	// unsent, the tick it went in flight at.
	sent bool
	at   uint64
}

// readRounds is the node's round state, guarded by its mutex.
type readRounds struct {
	mu sync.Mutex
	// run prefixes every round's request context: random, drawn once per
	// Open (newRun), so that no two runs of the node share a context.
	run      [8]byte
	seq      uint64
	inflight *readRound // sent, or about to be (gathering), not answered
	// gathering: inflight is not sent yet, so a caller arriving now may
	// ride it.
	gathering bool
	next      *readRound // waiting for inflight to be answered; not sent
	ticks     uint64     // raft ticks so far (tick)
	// lastRiders is how many callers the last answered round had: with
	// one, the callers come one at a time and a round is sent without
	// waiting for company.
	lastRiders int

	sent atomic.Uint64 // rounds sent so far, resends included (tests, metrics)
}

// readCtxLen is the length of a round's request context: the run's prefix
// and the round's number.
const readCtxLen = 16

// newRun draws the prefix of this run's request contexts.
func (rr *readRounds) newRun() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	_, _ = rand.Read(rr.run[:]) // crypto/rand.Read never fails (it crashes instead)
}

func (rr *readRounds) newRoundLocked() *readRound {
	rr.seq++
	ctx := make([]byte, 0, readCtxLen)
	ctx = binary.BigEndian.AppendUint64(append(ctx, rr.run[:]...), rr.seq)
	return &readRound{ctx: ctx, done: make(chan struct{}), turn: make(chan struct{}, 1)}
}

// join returns the round the caller rides, and whether the caller must
// send it (no round was in flight: the caller gathers it, then seals and
// sends it).
func (rr *readRounds) join() (r *readRound, send bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.inflight == nil {
		rr.inflight = rr.newRoundLocked()
		rr.inflight.at = rr.ticks
		rr.gathering = true
		rr.inflight.riders++
		return rr.inflight, true
	}
	if rr.gathering {
		rr.inflight.riders++
		return rr.inflight, false
	}
	if rr.next == nil {
		rr.next = rr.newRoundLocked()
	}
	rr.next.riders++
	return rr.next, false
}

// seal ends the gathering of round r, about to be sent: the callers that
// arrive from now on ride the next round. It reports whether r still needs
// sending: false once the raft loop sent it (tick) or it was answered.
func (rr *readRounds) seal(r *readRound) bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.inflight != r {
		return false
	}
	rr.gathering = false
	return !r.sent
}

// markSent records that the raft loop handed round r to raft; the loop
// calls it.
func (rr *readRounds) markSent(r *readRound) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.markSentLocked(r)
}

func (rr *readRounds) markSentLocked(r *readRound) {
	r.sent, r.at = true, rr.ticks
	rr.sent.Add(1)
}

// passTurn hands the sending of r, which its sender could not send, to
// another of its callers, if one is waiting and none holds it already.
func (r *readRound) passTurn() {
	select {
	case r.turn <- struct{}{}:
	default:
	}
}

// riders returns how many callers have joined round r, and whether the
// last answered round had more than one.
func (rr *readRounds) riders(r *readRound) (n int, busy bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return r.riders, rr.lastRiders > 1
}

// answered resolves the round in flight if ctx is its request context
// and hands the next round, if callers wait for it, to one of them to
// gather and send. The raft loop calls it.
func (rr *readRounds) answered(ctx []byte, index uint64) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	r := rr.inflight
	if r == nil || !bytes.Equal(r.ctx, ctx) {
		// An answer to a resent round already answered, or to a round of
		// an earlier run of this node.
		return
	}
	r.index = index
	close(r.done)
	rr.lastRiders = r.riders
	rr.inflight, rr.next = rr.next, nil
	rr.gathering = rr.inflight != nil
	if n := rr.inflight; n != nil {
		n.at = rr.ticks
		n.turn <- struct{}{} // never blocks: the round's only hand-off
	}
}

// Ticks after which the raft loop sends the round in flight itself: one
// that no caller sent (its sender's context ended, or no caller took the
// hand-off), and one sent but not answered. A caller gathers and sends a
// round within microseconds, so two ticks (at least one whole tick) mean
// that none will; a leader answers a ReadIndex after one heartbeat round
// trip, so an answer missing after two heartbeat intervals was lost (or
// its leader is gone).
const readUnsentTicks = 2

func (j *Journal) readResendTicks() uint64 {
	return max(2, 2*uint64(j.cfg.HeartbeatTicks))
}

// tick counts a raft tick and returns the request context of the round in
// flight if the raft loop must send it now (see readUnsentTicks): unsent
// for readUnsentTicks, or sent and unanswered for resendTicks. Without a
// known leader it returns nil: raft would drop the request, and the round
// goes out at the first tick that knows one. The raft loop calls it and
// sends what it returns; the round then counts as sent (sealed: no caller
// arriving later rides it).
func (rr *readRounds) tick(leaderKnown bool, resendTicks uint64) []byte {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.ticks++
	r := rr.inflight
	if r == nil || !leaderKnown {
		return nil
	}
	wait := resendTicks
	if !r.sent {
		wait = readUnsentTicks
	}
	if rr.ticks-r.at < wait {
		return nil
	}
	rr.gathering = false
	rr.markSentLocked(r)
	return r.ctx
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
	r, send := j.rounds.join()
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
				r.passTurn()
				return operr.Errorf("journal: read barrier: %w", err)
			}
		}
		select {
		case <-r.done:
			if err := j.WaitApplied(ctx, r.index); err != nil {
				return err
			}
			return j.waitChecked(ctx)
		case <-r.turn:
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
func (j *Journal) gatherRound(r *readRound) bool {
	seen, busy := j.rounds.riders(r)
	for i := 0; busy && i < gatherYields; i++ {
		runtime.Gosched()
		n, _ := j.rounds.riders(r)
		if n == seen {
			break
		}
		seen = n
	}
	return j.rounds.seal(r)
}

// sendRound hands round r's ReadIndex to the raft loop. The round stays in
// flight when ctx ends first: another caller, or the raft loop at its
// ticks, sends it.
func (j *Journal) sendRound(ctx context.Context, r *readRound) error {
	return j.do(ctx, func() {
		j.rn.ReadIndex(r.ctx)
		j.rounds.markSent(r)
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
		j.rounds.answered(rs.RequestCtx, max(rs.Index, floor))
	}
}

// raiseReadIndex raises a ReadIndex answer to another node to at least
// floor.
func raiseReadIndex(m *raftpb.Message, floor uint64) {
	if m.GetIndex() < floor {
		m.Index = new(floor)
	}
}

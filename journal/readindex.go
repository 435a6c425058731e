package journal

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"

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
// the sending on to another caller of the round. A round whose answer does
// not come (no leader, a lost message), or that no caller is left to
// send, is sent again, under the same request context (which raft
// deduplicates), by the first caller, of this round or of the next, to
// wait an election timeout without any round being sent: the callers of
// the next round depend on it as much as its own, which may all have
// given up.

// readRound is one ReadIndex request and the callers riding it.
type readRound struct {
	id   uint64        // the ReadIndex request context
	done chan struct{} // closed when index is set
	// turn holds the hand-off of the round's sending, for one of its
	// callers to take: put there by the raft loop, or by a sender that
	// could not send (passTurn).
	turn   chan struct{}
	index  uint64 // the leader's commit index as of the request
	riders int    // the callers that joined it; guarded by readRounds.mu
}

// readRounds is the node's round state, guarded by its mutex.
type readRounds struct {
	mu       sync.Mutex
	seq      uint64
	inflight *readRound // sent, or about to be (gathering), not answered
	// gathering: inflight is not sent yet, so a caller arriving now may
	// ride it.
	gathering bool
	next      *readRound // waiting for inflight to be answered; not sent
	sends     uint64     // rounds sent so far, resends included
	// lastRiders is how many callers the last answered round had: with
	// one, the callers come one at a time and a round is sent without
	// waiting for company.
	lastRiders int

	sent atomic.Uint64 // sends, readable without the lock (tests, metrics)
}

func (rr *readRounds) newRoundLocked() *readRound {
	rr.seq++
	return &readRound{id: rr.seq, done: make(chan struct{}), turn: make(chan struct{}, 1)}
}

// join returns the round the caller rides, whether the caller must send it
// (no round was in flight: the caller gathers it, then seals and sends
// it), and the send count it saw.
func (rr *readRounds) join() (r *readRound, send bool, sends uint64) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.inflight == nil {
		rr.inflight = rr.newRoundLocked()
		rr.gathering = true
		rr.inflight.riders++
		rr.countSendLocked()
		return rr.inflight, true, rr.sends
	}
	if rr.gathering {
		rr.inflight.riders++
		return rr.inflight, false, rr.sends
	}
	if rr.next == nil {
		rr.next = rr.newRoundLocked()
	}
	rr.next.riders++
	return rr.next, false, rr.sends
}

// seal ends the gathering of round r, about to be sent: the callers that
// arrive from now on ride the next round.
func (rr *readRounds) seal(r *readRound) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.inflight == r {
		rr.gathering = false
	}
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

func (rr *readRounds) countSendLocked() {
	rr.sends++
	rr.sent.Add(1)
}

// answered resolves the round in flight if id is its request and hands
// the next round, if callers wait for it, to one of them to gather and
// send. The raft loop calls it.
func (rr *readRounds) answered(id, index uint64) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	r := rr.inflight
	if r == nil || r.id != id {
		return // an answer to a resent round already answered
	}
	r.index = index
	close(r.done)
	rr.lastRiders = r.riders
	rr.inflight, rr.next = rr.next, nil
	rr.gathering = rr.inflight != nil
	if n := rr.inflight; n != nil {
		rr.countSendLocked()
		n.turn <- struct{}{} // never blocks: the round's only hand-off
	}
}

// stalled is called by a caller that waited an election timeout since it
// saw seen sends. If no round was sent meanwhile, the round in flight (which
// need not be the caller's: it may ride the next) went unanswered, and the
// caller must send it again; stalled returns it, and the send count.
func (rr *readRounds) stalled(seen uint64) (*readRound, uint64) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.inflight == nil || rr.sends != seen {
		return nil, rr.sends
	}
	rr.gathering = false // sent now, whoever holds its hand-off
	rr.countSendLocked()
	return rr.inflight, rr.sends
}

// ReadBarrier makes the next local reads linearizable: it learns the
// leader's commit index through a ReadIndex issued after the call began
// (raft ReadIndex; works on followers and observers), shared with the
// concurrent callers, and waits until this node has applied it. Without a
// leader the round is sent again every election timeout until ctx ends
// (the error then wraps ErrNoLeader). A node that knows it was removed
// fails with ErrRemoved: no member answers it any more; one whose
// corruption alarm is raised, with ErrCorrupt (a *CorruptError).
func (j *Journal) ReadBarrier(ctx context.Context) error {
	defer j.observeReadBarrier(j.cfg.Clock.Now())
	if err := j.removedErr(); err != nil {
		return operr.Errorf("journal: read barrier: %w", err)
	}
	if c := j.corruptErr(); c != nil {
		return operr.Errorf("journal: read barrier: %w", c)
	}
	r, send, seen := j.rounds.join()
	retry, stop := j.cfg.Clock.NewTicker(j.electionTimeout())
	defer stop()
	for {
		if send {
			send = false
			j.gatherRound(r)
			if err := j.sendRound(ctx, r); err != nil {
				r.passTurn()
				return operr.Errorf("journal: read barrier: %w", err)
			}
		}
		select {
		case <-r.done:
			return j.WaitApplied(ctx, r.index)
		case <-r.turn:
			send = true // the raft loop handed the round's sending to this caller
		case <-retry:
			if err := j.removedErr(); err != nil {
				return operr.Errorf("journal: read barrier: %w", err)
			}
			var again *readRound
			if again, seen = j.rounds.stalled(seen); again != nil {
				if err := j.sendRound(ctx, again); err != nil {
					return operr.Errorf("journal: read barrier: %w", err)
				}
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
// While rounds have one caller each, it sends at once.
func (j *Journal) gatherRound(r *readRound) {
	seen, busy := j.rounds.riders(r)
	for i := 0; busy && i < gatherYields; i++ {
		runtime.Gosched()
		n, _ := j.rounds.riders(r)
		if n == seen {
			break
		}
		seen = n
	}
	j.rounds.seal(r)
}

// sendRound hands round r's ReadIndex to the raft loop. The round stays in
// flight when ctx ends first: the callers still waiting send it again once
// an election timeout passes.
func (j *Journal) sendRound(ctx context.Context, r *readRound) error {
	rctx := encodeReadCtx(r.id)
	return j.do(ctx, func() { j.rn.ReadIndex(rctx) })
}

// readStates releases the rounds raft answered in a Ready, and hands the
// next round to its callers, on the raft loop.
//
// A leader that is the only voter answers a ReadIndex at once with its
// commit index, even before it has committed an entry in its term; after
// a restart that index can be below entries applied and acknowledged
// before it (the commit index on disk may lag the log). Every entry in
// such a leader's log commits, so its rounds wait for its last index too.
func (j *Journal) readStates(states []raft.ReadState) {
	if len(states) == 0 {
		return
	}
	var floor uint64
	if j.state.Load() == uint32(raft.StateLeader) && j.soleVoter() {
		floor = j.lastIndex
	}
	for _, rs := range states {
		j.rounds.answered(decodeReadCtx(rs.RequestCtx), max(rs.Index, floor))
	}
}

func encodeReadCtx(id uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, id)
}

func decodeReadCtx(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// soleVoter reports whether the membership has one voter, from which
// raft's configuration is built; raft's own Status would copy every
// peer's progress at each round.
func (j *Journal) soleVoter() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.mu.membership.Voters) == 1
}

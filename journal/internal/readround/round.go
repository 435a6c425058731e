package readround

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// Round is one ReadIndex request and the callers riding it.
type Round struct {
	ctx  []byte        // the ReadIndex request context (CtxLen bytes)
	done chan struct{} // closed when index is set
	// turn holds the hand-off of the round's sending, for one of its
	// callers to take: put there by the raft loop, or by a sender that
	// could not send (PassTurn).
	turn   chan struct{}
	index  uint64 // the answer: the leader's commit index as of the request, or its readFloor
	riders int    // the callers that joined it; guarded by Rounds.mu
	// The round's sending, guarded by Rounds.mu: whether it was sent,
	// the raft tick (Rounds.ticks) it was last sent at, or, while
	// unsent, the tick it went in flight at.
	sent bool
	at   uint64
}

// Rounds is the node's round state, guarded by its mutex.
type Rounds struct {
	mu sync.Mutex
	// run prefixes every round's request context: random, drawn once per
	// Open (NewRun), so that no two runs of the node share a context.
	run      [8]byte
	seq      uint64
	inflight *Round // sent, or about to be (gathering), not answered
	// gathering: inflight is not sent yet, so a caller arriving now may
	// ride it.
	gathering bool
	next      *Round // waiting for inflight to be answered; not sent
	ticks     uint64 // raft ticks so far (tick)
	// lastRiders is how many callers the last answered round had: with
	// one, the callers come one at a time and a round is sent without
	// waiting for company.
	lastRiders int

	sent atomic.Uint64 // rounds sent so far, resends included (tests, metrics)
}

// CtxLen is the length of a round's request context: the run's prefix
// and the round's number.
const CtxLen = 16

// NewRun draws the prefix of this run's request contexts.
func (rr *Rounds) NewRun() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	_, _ = rand.Read(rr.run[:]) // crypto/rand.Read never fails (it crashes instead)
}

func (rr *Rounds) newRoundLocked() *Round {
	rr.seq++
	ctx := make([]byte, 0, CtxLen)
	ctx = binary.BigEndian.AppendUint64(append(ctx, rr.run[:]...), rr.seq)
	return &Round{ctx: ctx, done: make(chan struct{}), turn: make(chan struct{}, 1)}
}

// Join returns the round the caller rides, and whether the caller must
// send it (no round was in flight: the caller gathers it, then seals and
// sends it).
func (rr *Rounds) Join() (r *Round, send bool) {
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

// Seal ends the gathering of round r, about to be sent: the callers that
// arrive from now on ride the next round. It reports whether r still needs
// sending: false once the raft loop sent it (Tick) or it was answered.
func (rr *Rounds) Seal(r *Round) bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.inflight != r {
		return false
	}
	rr.gathering = false
	return !r.sent
}

// MarkSent records that the raft loop handed round r to raft; the loop
// calls it.
func (rr *Rounds) MarkSent(r *Round) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.markSentLocked(r)
}

func (rr *Rounds) markSentLocked(r *Round) {
	r.sent, r.at = true, rr.ticks
	rr.sent.Add(1)
}

// PassTurn hands the sending of r, which its sender could not send, to
// another of its callers, if one is waiting and none holds it already.
func (r *Round) PassTurn() {
	select {
	case r.turn <- struct{}{}:
	default:
	}
}

// Riders returns how many callers have joined round r, and whether the
// last answered round had more than one.
func (rr *Rounds) Riders(r *Round) (n int, busy bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return r.riders, rr.lastRiders > 1
}

// Answered resolves the round in flight if ctx is its request context
// and hands the next round, if callers wait for it, to one of them to
// gather and send. The raft loop calls it.
func (rr *Rounds) Answered(ctx []byte, index uint64) {
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
const UnsentTicks = 2

// Tick counts a raft tick and returns the request context of the round in
// flight if the raft loop must send it now (see UnsentTicks): unsent
// for UnsentTicks, or sent and unanswered for resendTicks. Without a
// known leader it returns nil: raft would drop the request, and the round
// goes out at the first tick that knows one. The raft loop calls it and
// sends what it returns; the round then counts as sent (sealed: no caller
// arriving later rides it).
func (rr *Rounds) Tick(leaderKnown bool, resendTicks uint64) []byte {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.ticks++
	r := rr.inflight
	if r == nil || !leaderKnown {
		return nil
	}
	wait := resendTicks
	if !r.sent {
		wait = UnsentTicks
	}
	if rr.ticks-r.at < wait {
		return nil
	}
	rr.gathering = false
	rr.markSentLocked(r)
	return r.ctx
}

// Ctx returns the round's ReadIndex request context, which the journal
// hands to raft.
func (r *Round) Ctx() []byte { return r.ctx }

// Done is closed once the round is answered; Index then holds the answer.
func (r *Round) Done() <-chan struct{} { return r.done }

// Index is the round's answer, set before Done is closed.
func (r *Round) Index() uint64 { return r.index }

// Turn hands the round's sending to the caller that receives from it
// (Answered, or a sender that could not send: PassTurn).
func (r *Round) Turn() <-chan struct{} { return r.turn }

// Sent returns how many rounds were sent so far, resends included.
func (rr *Rounds) Sent() uint64 { return rr.sent.Load() }

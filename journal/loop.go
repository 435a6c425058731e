package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// proposal is a request to the raft loop.
type proposal struct {
	data  []byte             // normal entry (envelope)
	cc    *raftpb.ConfChange // or a conf change
	force bool               // skip the safe-removal check
	done  chan error         // buffered(1): nil when raft accepted it
	// forward: a data proposal a follower may hand to raft, which forwards
	// it to the leader (conf changes are forwarded over HTTP instead).
	forward bool
	// quiet: done hears only of a refusal. The proposer waits for the
	// apply (or a leader change) instead, and wakes once, not twice.
	quiet bool
	// bounded: a user entry carrying since (envelope.EncodeUserSince), which
	// expires when it lands more than the dedupe window after since.
	bounded bool
	since   uint64
	// released is set by the loop once it is done with the proposal: it
	// reads none of its fields and sends nothing more on done. The
	// proposer may then reuse the record and its done channel for its
	// next copy (submission.proposal).
	released atomic.Bool
}

// reply sends err on p.done and releases p.
func (p *proposal) reply(err error) {
	p.done <- err
	p.released.Store(true)
}

// run is the raft loop: the only goroutine that touches j.loop, raft's
// RawNode among it. Each iteration handles one event (tick, proposals,
// inbound messages, an operation, a finished append), then at most one
// Ready (handleReady): the disk write goes to the append goroutine,
// messages that need none are sent, committed entries go to the applier.
// Neither the fsync nor a slow state machine stops ticks or Readys; a full
// apply queue holds back only the committed entries (releaseApplyAcks).
func (j *Journal) run() {
	defer j.markLoopStopped()
	defer j.recoverStorageFailure()
	tickc, stopTick := j.cfg.Clock.NewTicker(j.cfg.TickInterval)
	defer stopTick()
	staleEvery := j.cfg.StaleAfter / 2
	var lastStamp int64
	var lastCheck time.Time
	var err error
	if j.loop.lastIndex, err = j.store.LastIndex(); err != nil {
		j.fail(operr.Errorf("journal: last index: %w", err))
		return
	}
	j.lastIndexPub.Store(j.loop.lastIndex)
	more := make(chan struct{})
	close(more)
	for err == nil {
		// Every iteration that changed raft's log ended with a Ready, so
		// lastIndex is raft's last index again.
		j.loop.logBound = j.loop.lastIndex
		// With a Ready pending (a replay, a follower catching up) the select
		// does not block: events and Readys alternate.
		var readyc <-chan struct{}
		if j.loop.rn.HasReady() {
			readyc = more
		}
		select {
		case <-j.stopc:
			j.failBatch(ErrClosed)
			j.failProposals()
			return
		case <-tickc:
			j.noteTick()
			j.tick()
			if k := j.cfg.knobs; k != nil && k.Ticked != nil {
				k.Ticked()
			}
		case p := <-j.propc:
			j.propose(p)
			j.gather()
		case in := <-j.recvc:
			j.step(in)
		case op := <-j.opc:
			op()
		case r := <-j.reportc:
			if r.snapshot {
				st := raft.SnapshotFinish
				if !r.ok {
					st = raft.SnapshotFailure
				}
				j.loop.rn.ReportSnapshot(r.id, st)
				j.snapsOut.Add(-1)
				j.notifyChanged()
			} else {
				j.loop.rn.ReportUnreachable(r.id)
			}
		case res := <-j.appendDone:
			err = j.appended(res)
		case <-j.applyq.room():
			j.releaseApplyAcks()
		case <-j.store.HaltedCh():
			err = j.store.Halted() // a background write failed
		case <-j.checkc:
			if k := j.cfg.knobs; k == nil || !k.HoldReports {
				j.proposeReport()
			}
		case <-readyc:
		}
		if c := j.corruptErr(); c != nil && err == nil {
			// The applier found this member's state differs from the
			// majority's: stop taking part, as a crashed member would (a
			// leader so gives way), and serve nothing (check.go), once
			// this member's own report is on its way.
			j.sendLastReport()
			err = c
		}
		if err != nil {
			break
		}
		// Take what else arrived meanwhile (proposals, messages), so one
		// Ready covers it all.
		if err = j.drain(); err != nil {
			break
		}
		j.flushProposals()
		// The leader journals its clock every StaleAfter/2, and at once
		// when it takes over.
		if j.state.Load() == uint32(raft.StateLeader) {
			now := j.stamps.now().UnixNano()
			if now-lastStamp >= int64(staleEvery) {
				// Dropped (uncommitted limit, transfer): retried next time.
				if j.loop.rn.Propose(envelope.EncodeTimestamp(now)) == nil {
					j.loop.stepped++
					lastStamp = now
				}
				j.maybeRaiseVersion()
			}
		} else {
			lastStamp = 0
		}
		j.maybeCheck(&lastCheck)
		if !j.loop.rn.HasReady() {
			continue
		}
		err = j.handleReady(j.loop.rn.Ready())
		if err == nil && lastStamp == 0 && j.state.Load() == uint32(raft.StateLeader) {
			now := j.stamps.now().UnixNano()
			if j.loop.rn.Propose(envelope.EncodeTimestamp(now)) == nil {
				lastStamp = now
			}
			j.maybeRaiseVersion()
		}
	}
	// A persist failure: the node can no longer promise durability. Stop
	// the loop (raft must not advance) but keep the process alive.
	j.fail(err)
}

// tick advances raft's clock by one tick and sends the read round that
// waits for it, except on a node that knows it
// was removed (as a voter it would campaign every election timeout, and
// every member would refuse each vote request) and on a candidate whose
// vote for itself is not durable yet. raft (with AsyncStorageWrites)
// counts that vote only once the append goroutine wrote the new term and
// vote; were the election timer to run meanwhile, a disk whose fsync takes
// longer than the election timeout would start every campaign again at
// the next term before the vote of the last one was counted, and a single
// voter would never elect itself. So a slow disk delays the election by
// its fsync; it does not prevent it.
func (j *Journal) tick() {
	if j.removed.Load() {
		return
	}
	if st := raft.StateType(j.state.Load()); j.loop.selfVotes > 0 && (st == raft.StateCandidate || st == raft.StatePreCandidate) {
		return
	}
	j.loop.rn.Tick()
	j.loop.ticks++
	// The read round in flight, if no caller sent it or its answer is
	// overdue (readindex.go).
	if ctx := j.rounds.Tick(j.leader.Load() != 0, j.readResendTicks()); ctx != nil {
		j.loop.rn.ReadIndex(ctx)
	}
}

// noteTick counts a stall of the loop (metrics.loopStalls): a tick taken
// ElectionTicks-HeartbeatTicks tick intervals or more after the one
// before. The ticker drops the ticks the loop does not take, so raft's
// clock stood still meanwhile: as leader, this node sent no heartbeat for
// about that long, and a follower that heard nothing else from it for an
// election timeout of its own ticks grants another voter's (pre-)vote. A
// paused process stalls the loop so, and so does a starved CPU on which
// a few iterations take that long (stepping and encoding a returning
// follower's catch-up traffic); the counter tells a lead lost that way
// from one the network took.
func (j *Journal) noteTick() {
	now := j.cfg.Clock.Now()
	stall := time.Duration(j.cfg.ElectionTicks-j.cfg.HeartbeatTicks) * j.cfg.TickInterval
	if gap := now.Sub(j.loop.lastTick); !j.loop.lastTick.IsZero() && gap >= stall {
		j.metrics.loopStalls.Add(1)
		j.log.Warn("raft loop stalled: no tick taken for most of an election timeout", "gap", gap, "state", raft.StateType(j.state.Load()))
	}
	j.loop.lastTick = now
}

// selfVotesIn counts the votes for this node among the responses m holds
// back until its write is durable.
func (j *Journal) selfVotesIn(m *raftpb.Message) int {
	n := 0
	for _, r := range m.GetResponses() {
		if t := r.GetType(); r.GetTo() == j.id && (t == raftpb.MsgVoteResp || t == raftpb.MsgPreVoteResp) {
			n++
		}
	}
	return n
}

// recoverStorageFailure stops the loop, as a failed persist does, when
// raft panicked on a read the store failed: raft has no answer for a
// storage error but to panic (raftLog.term and slice), and the store
// halted before returning it (raftstore.Store.readFailed). Raft holds no
// lock, but its state is whatever the panic left, so the loop never calls
// into it again; Close closes the store as after any halt. Any other panic
// is a bug and goes on.
func (j *Journal) recoverStorageFailure() {
	r := recover()
	if r == nil {
		return
	}
	cause := j.store.Halted()
	if cause == nil {
		panic(r)
	}
	j.log.Error("raft stopped on a storage failure", "panic", fmt.Sprint(r), "err", cause)
	j.fail(cause)
}

// gatherRounds bounds how often gather yields again for proposals that
// keep arriving: enough rounds to take the stragglers of a burst, few enough
// that a steady stream of proposals cannot hold the loop back from its
// Ready (BenchmarkPropose shows the choice).
const gatherRounds = 8

// gather lets the proposers readied together with the one that woke the
// loop queue their proposals before the loop steps the batch. That
// proposer handed the loop the rest of its time slice (the runtime runs a
// goroutine readied by a channel send next, on the sender's P), so the
// others have not run yet: without yielding, a Ready carries about one
// proposal. One yield lets them run, so one Ready (one append, one fsync,
// one message a follower) carries many proposals; yielding again while
// more keep arriving, at most gatherRounds times, takes the stragglers too.
// A lone proposer costs one yield. BenchmarkPropose shows the effect in
// its writes a second and its fsyncs a write (syncs/op).
func (j *Journal) gather() {
	runtime.Gosched()
	for range gatherRounds {
		n := len(j.propc)
		if n == 0 {
			return
		}
		for ; n > 0; n-- {
			j.propose(<-j.propc) // only the loop receives: never blocks
		}
		runtime.Gosched()
	}
}

// drain takes the queued proposals, inbound messages and finished appends
// (the sooner those are stepped, the sooner entries commit), bounded so a
// flood cannot starve ticks.
func (j *Journal) drain() error {
	for n := 0; n < 4096; n++ {
		select {
		case res := <-j.appendDone:
			if err := j.appended(res); err != nil {
				return err
			}
		case p := <-j.propc:
			j.propose(p)
		case in := <-j.recvc:
			j.step(in)
		default:
			return nil
		}
	}
	return nil
}

// fail records the error that stopped the loop or the applier. Whoever
// waits for an apply that will now never come is woken with it: proposers
// (their answer wraps ErrClosed, so they do not retry) and WaitApplied.
func (j *Journal) fail(err error) {
	err = haltCause(err)
	j.log.Error("journal stopped", "err", err)
	if !j.failed.CompareAndSwap(nil, &err) {
		return
	}
	failure := j.loopErr()
	j.mu.Lock()
	defer j.mu.Unlock()
	// A final answer: the waiters answered here leave the map, as after
	// a successful resolve, so no later resolve (the applier finishing its
	// batch) sends to them.
	for key := range j.mu.waiters {
		for w := j.takeWaiters(key); w != nil; w = w.next {
			w.c <- applyResult{err: failure} // never blocks: see resolve
		}
	}
	close(j.mu.appliedCh)
	j.mu.appliedCh = make(chan struct{})
}

// refuse counts and logs a message from the network that was not stepped.
func (j *Journal) refuse(err error) {
	j.refusedMsgs.Add(1)
	j.log.Warn("raft message refused", "err", err)
}

func (j *Journal) failProposals() {
	for {
		select {
		case p := <-j.propc:
			p.reply(ErrClosed)
		default:
			return
		}
	}
}

func (j *Journal) propose(p *proposal) {
	if j.state.Load() != uint32(raft.StateLeader) && (!p.forward || j.leader.Load() == 0) {
		p.reply(ErrNotLeader)
		return
	}
	if p.cc == nil {
		if p.bounded && j.state.Load() == uint32(raft.StateLeader) && j.landsAt(p)-p.since > j.dedupeWindow() {
			j.answer(p, errBeyondWindow)
			return
		}
		j.loop.batch = append(j.loop.batch, p)
		j.loop.batchBytes += uint64(len(p.data))
		if j.loop.batchBytes >= j.cfg.MaxSizePerMsg {
			j.flushProposals()
		}
		return
	}
	// A membership change: after the batch, to keep the order proposals
	// arrived in.
	j.flushProposals()
	err := j.checkConfChange(p.cc, p.force)
	if err == nil {
		if err = j.loop.rn.ProposeConfChange(p.cc); err == nil {
			// raft may still turn it into an empty entry (another change
			// pending); handleReady tells which.
			var ctx membership.ConfContext
			_ = json.Unmarshal(p.cc.GetContext(), &ctx)
			j.loop.confQueue = append(j.loop.confQueue, ctx.Key)
		}
	}
	j.answer(p, err)
}

// landsAt is a lower bound of the index a leader's copy of p lands at:
// after raft's last index as of the last Ready, the proposals stepped
// since, and those batched ahead of p. While an fsync of a slow disk runs,
// the tail it has not made durable grows by every proposal made meanwhile,
// and a copy appended behind more than a dedupe window of it lands past
// its since's window: it could only expire (dedupe.Window.Judge), and proposing
// it again at once would append another copy behind the next tail.
func (j *Journal) landsAt(p *proposal) uint64 {
	return max(j.loop.lastIndex+j.loop.stepped+uint64(len(j.loop.batch))+1, p.since+1)
}

// answer tells a proposer whether raft took its proposal.
func (j *Journal) answer(p *proposal, err error) {
	if errors.Is(err, raft.ErrProposalDropped) {
		// Dropped: the uncommitted tail is full, or a leader transfer or a
		// conf change is pending.
		err = fmt.Errorf("%w: proposal dropped by raft", ErrBusy)
	}
	if err != nil || !p.quiet {
		p.done <- err
	}
	p.released.Store(true)
}

// flushProposals steps the batched normal proposals into raft as one
// MsgProp (as etcd's node.Propose would one at a time): raft appends them
// together and broadcasts one append per follower, where proposing them
// one by one costs an append message, its encoding, a follower step and a
// response per proposal. raft takes or drops the batch as a whole. On a
// follower raft forwards the batch to the leader, which may still drop it
// without a word: the proposers' waits are bounded and retried.
func (j *Journal) flushProposals() {
	if len(j.loop.batch) == 0 {
		return
	}
	ents := make([]raftpb.Entry, len(j.loop.batch))
	ptrs := make([]*raftpb.Entry, len(j.loop.batch))
	for i, p := range j.loop.batch {
		ents[i].Data = p.data
		ptrs[i] = &ents[i]
	}
	// On a follower the batch holds forwardable proposals only (propose
	// refused the rest): raft sends them to the leader it knows.
	err := j.loop.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(j.id), Entries: ptrs})
	if err == nil {
		j.loop.stepped += uint64(len(j.loop.batch))
	}
	for i, p := range j.loop.batch {
		j.answer(p, err)
		j.loop.batch[i] = nil
	}
	j.loop.batch = j.loop.batch[:0]
	j.loop.batchBytes = 0
}

// failBatch answers the batched proposals with err (the loop is ending).
func (j *Journal) failBatch(err error) {
	for i, p := range j.loop.batch {
		p.reply(err)
		j.loop.batch[i] = nil
	}
	j.loop.batch = j.loop.batch[:0]
	j.loop.batchBytes = 0
}

// step feeds inbound messages to raft, but for those that name an index
// beyond the log (checkAgainstLog): raft would panic on them.
func (j *Journal) step(in inbound) {
	var err error
	for _, m := range in.msgs {
		if e := checkAgainstLog(m, j.loop.logBound); e != nil {
			j.refuse(e)
			err = e
			continue
		}
		j.loop.heard[m.GetFrom()] = j.loop.ticks
		j.notifyChanged()
		if e := j.loop.rn.Step(m); e != nil && !errors.Is(e, raft.ErrStepPeerNotFound) && !errors.Is(e, raft.ErrStepLocalMsg) {
			err = e
		}
		// An append or a snapshot may have cut the log's tail; until the
		// next Ready says where it ends, the bound is the lowest it can be.
		switch m.GetType() {
		case raftpb.MsgApp:
			if n := len(m.GetEntries()); n > 0 {
				j.loop.logBound = min(j.loop.logBound, m.GetIndex()+uint64(n))
			}
		case raftpb.MsgSnap:
			j.loop.logBound = min(j.loop.logBound, m.GetSnapshot().GetMetadata().GetIndex())
		}
	}
	if in.done != nil {
		// A snapshot message (alone in its batch): raft took it if the
		// next Ready carries it; without a Ready to come it did not.
		if idx := in.msgs[0].GetSnapshot().GetMetadata().GetIndex(); err != nil || !j.loop.rn.HasReady() {
			j.releaseFetched(idx)
		} else {
			j.loop.steppedSnaps = append(j.loop.steppedSnaps, idx)
		}
		in.done <- err
	}
}

// handleReady processes one Ready (raft runs with AsyncStorageWrites).
// The loop never waits for the disk: the Ready's MsgStorageAppend (entries,
// HardState, snapshot, and the messages that must wait for them) goes to
// the append goroutine, whose synced write covers every append queued
// meanwhile (group commit across Readys); appended steps the responses once
// that write returned. Messages to peers that need no local write (a
// leader's appends, heartbeats) are sent at once, so a leader's fsync
// overlaps its followers' (Raft thesis §10.2.1): its own acknowledgement is
// one of those responses, so nothing commits on unsynced entries. raft
// hands out committed entries only once they are durable locally
// (etcd#14370), in the MsgStorageApply for the applier.
func (j *Journal) handleReady(rd raft.Ready) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		j.loop.lastIndex = rd.Snapshot.GetMetadata().GetIndex()
	}
	if n := len(rd.Entries); n > 0 {
		j.loop.lastIndex = rd.Entries[n-1].GetIndex()
	}
	j.loop.stepped = 0
	j.loop.logBound = j.loop.lastIndex
	j.lastIndexPub.Store(j.loop.lastIndex)
	// The ReadIndex answers of this Ready were made under the leadership
	// it starts or under the one it ends (readindex.go).
	floor := j.loop.readFloor
	if rd.SoftState != nil {
		j.setSoftState(rd.SoftState.Lead, rd.SoftState.RaftState)
	}
	floor = max(floor, j.loop.readFloor)
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		if t := rd.HardState.GetTerm(); t != j.term.Swap(t) {
			j.notifyLeadership()
		}
	}
	j.checkConfQueue(rd.Entries)
	j.notePendingVersions(rd.Entries)
	j.settleFetched(rd.Snapshot)
	var apply *raftpb.Message
	out := rd.Messages[:0:0]
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			j.loop.selfVotes += j.selfVotesIn(m)
			j.appendq.push(appendItem{msg: m})
		case raft.LocalApplyThread:
			apply = m
		default:
			if m.GetType() == raftpb.MsgReadIndexResp {
				raiseReadIndex(m, floor)
			}
			out = append(out, m)
		}
	}
	// Linearizable reads whose index is now known.
	j.readStates(rd.ReadStates, floor)
	if apply != nil {
		if err := j.handOff(apply.GetEntries(), nil); err != nil {
			return err
		}
		j.loop.heldApplyAcks = append(j.loop.heldApplyAcks, apply.GetResponses()...)
		j.releaseApplyAcks()
	}
	// Peers' messages go last: the goroutine readied last runs next on this
	// P, and the followers' appends are the longest path to a commit.
	j.send(out)
	j.forgetRemovedPeers()
	return nil
}

// releaseApplyAcks tells raft the committed entries handed to the applier
// are applied (the MsgStorageApplyResp of their Readys), unless the apply
// queue is full: then raft, which counts handed-out entries against
// MaxCommittedSizePerReady until they are acknowledged, hands out no more
// committed entries, while every Ready goes on carrying heartbeats, votes,
// appends and acknowledgements. The acknowledgements held go to raft, in
// order, once the applier has made room. So the queue holds at most
// ApplyQueueBytes plus one Ready's committed entries (the applier publishes
// what it really applied).
func (j *Journal) releaseApplyAcks() {
	if len(j.loop.heldApplyAcks) == 0 || j.applyq.full() {
		return
	}
	j.stepLocal(j.loop.heldApplyAcks)
	clear(j.loop.heldApplyAcks)
	j.loop.heldApplyAcks = j.loop.heldApplyAcks[:0]
}

// stepLocal steps responses raft addressed to itself. Like Advance, it
// ignores their errors: a stale one (an older term, a removed peer) is
// simply dropped by raft.
func (j *Journal) stepLocal(msgs []*raftpb.Message) {
	for _, m := range msgs {
		_ = j.loop.rn.Step(m)
	}
}

// send hands messages to the transport, counting snapshot transfers (no
// compaction while one is in flight) and vote requests.
func (j *Journal) send(msgs []*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	voted := false
	for _, m := range msgs {
		switch m.GetType() {
		case raftpb.MsgSnap:
			j.snapsOut.Add(1)
		case raftpb.MsgPreVote, raftpb.MsgVote:
			voted = true
		}
	}
	if voted {
		j.campaigns.Add(1)
	}
	j.tr.Send(msgs)
	if voted {
		j.notifyChanged()
	}
}

func (j *Journal) setSoftState(lead uint64, st raft.StateType) {
	changed := j.leader.Swap(lead) != lead
	if changed && lead != 0 {
		j.metrics.leaderChanges.Add(1)
	}
	if raft.StateType(j.state.Swap(uint32(st))) != st {
		changed = true
		j.loop.readFloor = 0
		if st == raft.StateLeader {
			j.loop.readFloor = j.loop.lastIndex
		}
	}
	if changed {
		j.loop.confQueue = nil
	}
	if changed {
		j.log.Info("raft state", "state", st, "leader", lead, "term", j.term.Load())
		j.notifyLeadership()
	}
}

func (j *Journal) notifyLeadership() {
	j.mu.Lock()
	close(j.mu.leaderCh)
	j.mu.leaderCh = make(chan struct{})
	j.mu.Unlock()
	next := make(chan struct{})
	close(*j.stir.Swap(&next))
}

// markLoopStopped closes loopDead and then, for good, the stir channel: the
// raft loop's last act. Only the loop replaces stir, so nothing replaces
// the closed one.
func (j *Journal) markLoopStopped() {
	close(j.loopDead)
	close(*j.stir.Load())
}

// stirred returns the channel closed at the next leader or term change or
// when the raft loop stops (Journal.stir).
func (j *Journal) stirred() <-chan struct{} { return *j.stir.Load() }

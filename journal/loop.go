package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
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
}

// run is the raft loop: the only goroutine that touches j.rn. Each
// iteration handles one event (tick, proposals, inbound messages, an
// operation, a finished append), then at most one Ready (handleReady): the
// disk write goes to the append goroutine, messages that need none are
// sent, committed entries go to the applier. Neither the fsync nor a slow
// state machine stops ticks or Readys; a full apply queue holds back only
// the committed entries (releaseApplyAcks).
func (j *Journal) run() {
	defer close(j.loopDead)
	tickc, stopTick := j.cfg.Clock.NewTicker(j.cfg.TickInterval)
	defer stopTick()
	staleEvery := j.cfg.StaleAfter / 2
	var lastStamp int64
	var err error
	if j.lastIndex, err = j.store.LastIndex(); err != nil {
		j.fail(fmt.Errorf("journal: last index: %w", err))
		return
	}
	j.lastIndexPub.Store(j.lastIndex)
	more := make(chan struct{})
	close(more)
	for err == nil {
		// Every iteration that changed raft's log ended with a Ready, so
		// lastIndex is raft's last index again.
		j.logBound = j.lastIndex
		// With a Ready pending (a replay, a follower catching up) the select
		// does not block: events and Readys alternate.
		var readyc <-chan struct{}
		if j.rn.HasReady() {
			readyc = more
		}
		select {
		case <-j.stopc:
			j.failBatch(ErrClosed)
			j.failProposals()
			return
		case <-tickc:
			j.rn.Tick()
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
				j.rn.ReportSnapshot(r.id, st)
				j.snapsOut.Add(-1)
			} else {
				j.rn.ReportUnreachable(r.id)
			}
		case res := <-j.appendDone:
			err = j.appended(res)
		case <-j.applyq.room():
			j.releaseApplyAcks()
		case <-j.store.HaltedCh():
			err = j.store.Halted() // a background write failed
		case <-readyc:
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
			now := j.cfg.Clock.Now().UnixNano()
			if now-lastStamp >= int64(staleEvery) {
				// Dropped (uncommitted limit, transfer): retried next time.
				if j.rn.Propose(encodeTimestamp(now)) == nil {
					lastStamp = now
				}
			}
		} else {
			lastStamp = 0
		}
		if !j.rn.HasReady() {
			continue
		}
		err = j.handleReady(j.rn.Ready())
		if err == nil && lastStamp == 0 && j.state.Load() == uint32(raft.StateLeader) {
			now := j.cfg.Clock.Now().UnixNano()
			if j.rn.Propose(encodeTimestamp(now)) == nil {
				lastStamp = now
			}
		}
	}
	// A persist failure: the node can no longer promise durability. Stop
	// the loop (raft must not advance) but keep the process alive.
	j.fail(err)
}

// gatherRounds bounds how often gather yields again for proposals that
// keep arriving. 8 against 4: +6% writes/s (4 of 5 interleaved pairs), a
// lower p99 and CPU per write in all 5; 16 was slower than 8 in 4 of 5.
const gatherRounds = 8

// gather lets the proposers readied together with the one that woke the
// loop queue their proposals before the loop steps the batch. That
// proposer handed the loop the rest of its time slice (the runtime runs a
// goroutine readied by a channel send next, on the sender's P), so the
// others have not run yet: without yielding, a Ready carries about one
// proposal (1.4 with 64 proposers). One yield lets them run (~20 per
// Ready: a tenth of the Readys, appends and messages, +25% writes/s);
// yielding again while more keep arriving, at most gatherRounds times,
// takes the stragglers too (~30 per Ready, 0.025–0.030 instead of 0.037
// leader fsyncs per write, +11% writes/s over 8 interleaved rounds with 4
// rounds). A lone proposer costs one yield.
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
	for key, ws := range j.mu.waiters {
		for _, w := range ws {
			w <- applyResult{err: failure} // never blocks: see resolve
		}
		j.nwaiters.Add(-int64(len(ws)))
		delete(j.mu.waiters, key)
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
			p.done <- ErrClosed
		default:
			return
		}
	}
}

func (j *Journal) propose(p *proposal) {
	if j.state.Load() != uint32(raft.StateLeader) && (!p.forward || j.leader.Load() == 0) {
		p.done <- ErrNotLeader
		return
	}
	if p.cc == nil {
		j.batch = append(j.batch, p)
		j.batchBytes += uint64(len(p.data))
		if j.batchBytes >= j.cfg.MaxSizePerMsg {
			j.flushProposals()
		}
		return
	}
	// A membership change: after the batch, to keep the order proposals
	// arrived in.
	j.flushProposals()
	err := j.checkConfChange(p.cc, p.force)
	if err == nil {
		if err = j.rn.ProposeConfChange(p.cc); err == nil {
			// raft may still turn it into an empty entry (another change
			// pending); handleReady tells which.
			var ctx confContext
			_ = json.Unmarshal(p.cc.GetContext(), &ctx)
			j.confQueue = append(j.confQueue, ctx.Key)
		}
	}
	j.answer(p, err)
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
}

// flushProposals steps the batched normal proposals into raft as one
// MsgProp (as etcd's node.Propose would one at a time): raft appends them
// together and broadcasts one append per follower, where proposing them
// one by one costs an append message, its encoding, a follower step and a
// response per proposal. raft takes or drops the batch as a whole. On a
// follower raft forwards the batch to the leader, which may still drop it
// without a word: the proposers' waits are bounded and retried.
func (j *Journal) flushProposals() {
	if len(j.batch) == 0 {
		return
	}
	ents := make([]raftpb.Entry, len(j.batch))
	ptrs := make([]*raftpb.Entry, len(j.batch))
	for i, p := range j.batch {
		ents[i].Data = p.data
		ptrs[i] = &ents[i]
	}
	// On a follower the batch holds forwardable proposals only (propose
	// refused the rest): raft sends them to the leader it knows.
	err := j.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(j.id), Entries: ptrs})
	for i, p := range j.batch {
		j.answer(p, err)
		j.batch[i] = nil
	}
	j.batch = j.batch[:0]
	j.batchBytes = 0
}

// failBatch answers the batched proposals with err (the loop is ending).
func (j *Journal) failBatch(err error) {
	for i, p := range j.batch {
		p.done <- err
		j.batch[i] = nil
	}
	j.batch = j.batch[:0]
	j.batchBytes = 0
}

// checkConfChange refuses a change raft could not apply (checkLeavesVoters,
// whatever force says) and, unless forced, a removal that leaves fewer
// reachable voters than a quorum of the new configuration.
func (j *Journal) checkConfChange(cc *raftpb.ConfChange, force bool) error {
	if err := j.checkPromote(cc); err != nil {
		return err
	}
	st := j.rn.Status()
	voters := st.Config.Voters.IDs()
	if err := checkLeavesVoters(cc, voters); err != nil {
		return err
	}
	if cc.GetType() != raftpb.ConfChangeRemoveNode || force {
		return nil
	}
	id := cc.GetNodeId()
	if _, ok := voters[id]; !ok {
		return nil // a learner: no quorum impact
	}
	remaining, reachable := 0, 0
	now := time.Now()
	for v := range voters {
		if v == id {
			continue
		}
		remaining++
		if v == j.id || j.reachable(v, now) {
			reachable++
		}
	}
	if reachable < remaining/2+1 {
		return fmt.Errorf("%w: removing node %d leaves %d reachable of %d voters, below a quorum", ErrUnsafeRemoval, id, reachable, remaining)
	}
	return nil
}

// reachable reports whether a message from peer id arrived within the
// last election timeout (heartbeats answer ten times as often by default).
// raft's Progress.RecentActive is not used: the leader clears it for every
// peer at each check-quorum round, so for up to a heartbeat after one a
// healthy peer would look unreachable and a safe removal be refused.
func (j *Journal) reachable(id uint64, now time.Time) bool {
	t, ok := j.heard[id]
	return ok && now.Sub(t) <= j.electionTimeout()
}

// step feeds inbound messages to raft, but for those that name an index
// beyond the log (checkAgainstLog): raft would panic on them.
func (j *Journal) step(in inbound) {
	var err error
	now := time.Now()
	for _, m := range in.msgs {
		if e := checkAgainstLog(m, j.logBound); e != nil {
			j.refuse(e)
			err = e
			continue
		}
		j.heard[m.GetFrom()] = now
		if e := j.rn.Step(m); e != nil && !errors.Is(e, raft.ErrStepPeerNotFound) && !errors.Is(e, raft.ErrStepLocalMsg) {
			err = e
		}
		// An append or a snapshot may have cut the log's tail; until the
		// next Ready says where it ends, the bound is the lowest it can be.
		switch m.GetType() {
		case raftpb.MsgApp:
			if n := len(m.GetEntries()); n > 0 {
				j.logBound = min(j.logBound, m.GetIndex()+uint64(n))
			}
		case raftpb.MsgSnap:
			j.logBound = min(j.logBound, m.GetSnapshot().GetMetadata().GetIndex())
		}
	}
	if in.done != nil {
		// A snapshot message (alone in its batch): raft took it if the
		// next Ready carries it; without a Ready to come it did not.
		if idx := in.msgs[0].GetSnapshot().GetMetadata().GetIndex(); err != nil || !j.rn.HasReady() {
			j.releaseFetched(idx)
		} else {
			j.steppedSnaps = append(j.steppedSnaps, idx)
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
		j.lastIndex = rd.Snapshot.GetMetadata().GetIndex()
	}
	if n := len(rd.Entries); n > 0 {
		j.lastIndex = rd.Entries[n-1].GetIndex()
	}
	j.logBound = j.lastIndex
	j.lastIndexPub.Store(j.lastIndex)
	if rd.SoftState != nil {
		j.setSoftState(rd.SoftState.Lead, rd.SoftState.RaftState)
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		if t := rd.HardState.GetTerm(); t != j.term.Swap(t) {
			j.notifyLeadership()
		}
	}
	j.checkConfQueue(rd.Entries)
	j.settleFetched(rd.Snapshot)
	var apply *raftpb.Message
	out := rd.Messages[:0:0]
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			j.appendq.push(appendItem{msg: m})
		case raft.LocalApplyThread:
			apply = m
		default:
			out = append(out, m)
		}
	}
	// Linearizable reads whose index is now known.
	j.readStates(rd.ReadStates)
	if apply != nil {
		if err := j.handOff(apply.GetEntries(), nil); err != nil {
			return err
		}
		j.heldApplyAcks = append(j.heldApplyAcks, apply.GetResponses()...)
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
	if len(j.heldApplyAcks) == 0 || j.applyq.full() {
		return
	}
	j.stepLocal(j.heldApplyAcks)
	clear(j.heldApplyAcks)
	j.heldApplyAcks = j.heldApplyAcks[:0]
}

// forgetRemovedPeers drops the peers that membership changes removed from
// the transport, once the messages raft addressed to them in the same
// Ready were sent (the transport still delivers what it has queued).
// Dropping them at the change itself lost the append that commits a node's
// own removal, so a reachable removed node never learned of it.
func (j *Journal) forgetRemovedPeers() {
	for _, id := range j.removedPeers {
		j.tr.RemovePeer(id)
	}
	j.removedPeers = j.removedPeers[:0]
}

// appendResult is a batch of MsgStorageAppend the append goroutine wrote.
type appendResult struct {
	msgs []*raftpb.Message
	err  error
	// sent: the responses to peers went out from the append goroutine.
	sent bool
}

// appended runs on the loop once the append goroutine's synced write of res
// returned: a snapshot's membership and image install are queued, then the
// messages raft held back until the write (its own MsgStorageAppendResp and
// acknowledgements, a follower's MsgAppResp, votes) are stepped or sent.
func (j *Journal) appended(res appendResult) error {
	if res.err != nil {
		return fmt.Errorf("journal: persist: %w", res.err)
	}
	var out, local []*raftpb.Message
	for _, m := range res.msgs {
		if snap := m.GetSnapshot(); snap != nil && !raft.IsEmptySnap(snap) {
			if err := j.handOff(nil, snap); err != nil {
				return err
			}
		}
		if m.Commit != nil && m.GetCommit() > j.committed.Load() {
			j.committed.Store(m.GetCommit())
			j.mu.Lock()
			close(j.mu.commitCh)
			j.mu.commitCh = make(chan struct{})
			j.mu.Unlock()
		}
		for _, r := range m.GetResponses() {
			if r.GetTo() == j.id {
				local = appendAck(local, r)
			} else if !res.sent {
				out = appendAck(out, r)
			}
		}
	}
	j.stepLocal(local)
	j.send(out)
	j.forgetRemovedPeers()
	return nil
}

// sendResponses sends the responses to peers that msgs held back until
// they were durable (a follower's MsgAppResp, a vote), straight from the
// append goroutine: the leader hears of the write without waiting for this
// node's loop to be scheduled. A batch with a snapshot is left to the loop,
// which installs the snapshot's membership first.
func (j *Journal) sendResponses(msgs []*raftpb.Message) bool {
	var out []*raftpb.Message
	for _, m := range msgs {
		if !raft.IsEmptySnap(m.GetSnapshot()) {
			return false
		}
		for _, r := range m.GetResponses() {
			if r.GetTo() != j.id {
				out = appendAck(out, r)
			}
		}
	}
	j.send(out)
	return true
}

// appendAck appends m to out, where an append acknowledgement replaces an
// earlier one to the same peer in the same term: one synced write often
// covers several appends, and the acknowledgement of the last says all the
// leader needs (raft takes the highest index; the others are as good as
// lost on the network, which raft tolerates).
func appendAck(out []*raftpb.Message, m *raftpb.Message) []*raftpb.Message {
	if m.GetType() == raftpb.MsgAppResp && !m.GetReject() {
		for i, o := range out {
			if o.GetType() == raftpb.MsgAppResp && !o.GetReject() && o.GetTo() == m.GetTo() && o.GetTerm() == m.GetTerm() && o.GetIndex() <= m.GetIndex() {
				out = slices.Delete(out, i, i+1) // m takes its place at the end
				break
			}
		}
	}
	return append(out, m)
}

// stepLocal steps responses raft addressed to itself. Like Advance, it
// ignores their errors: a stale one (an older term, a removed peer) is
// simply dropped by raft.
func (j *Journal) stepLocal(msgs []*raftpb.Message) {
	for _, m := range msgs {
		_ = j.rn.Step(m)
	}
}

// appendQueue is the unbounded queue of work for the append goroutine, in
// order: raft's MsgStorageAppend from the loop (raft's in-flight limits
// bound them), and the other writes to the raft store that must not wait
// on the loop (ImageWritten's snapshot record and compaction).
type appendQueue struct {
	mu     sync.Mutex
	items  []appendItem
	notify chan struct{} // cap 1
}

// appendItem is a MsgStorageAppend, or (msg nil) an operation on the store.
type appendItem struct {
	msg *raftpb.Message
	op  func()
}

func newAppendQueue() *appendQueue {
	return &appendQueue{notify: make(chan struct{}, 1)}
}

func (q *appendQueue) push(it appendItem) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *appendQueue) take() []appendItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// appendLoop is the append goroutine: it writes what the loop queued, all
// of it in one synced Pebble batch (a snapshot or a store operation starts
// a batch of its own), and hands the messages back to the loop. Appends are
// written in the order raft emitted them, so a response means every earlier
// append is durable too, as raft requires.
func (j *Journal) appendLoop() {
	var msgs []*raftpb.Message
	for {
		items := j.appendq.take()
		if len(items) == 0 {
			select {
			case <-j.appendq.notify:
				continue
			case <-j.stopc:
				return
			}
		}
		for len(items) > 0 {
			msgs = msgs[:0]
			for len(items) > 0 && items[0].msg != nil {
				msgs = append(msgs, items[0].msg)
				items = items[1:]
			}
			if !j.writeAppends(msgs) {
				return
			}
			if len(items) > 0 {
				items[0].op()
				items = items[1:]
			}
		}
	}
}

// writeAppends persists msgs, a batch at a time, and hands each batch back
// to the loop. false means stop: the loop is stopping, or a write failed
// (raft must not go on).
func (j *Journal) writeAppends(msgs []*raftpb.Message) bool {
	for len(msgs) > 0 {
		n := 1
		for n < len(msgs) && raft.IsEmptySnap(msgs[n].GetSnapshot()) {
			n++
		}
		batch := slices.Clone(msgs[:n])
		res := appendResult{msgs: batch, err: j.persist(batch)}
		if snap := batch[0].GetSnapshot(); res.err == nil && !raft.IsEmptySnap(snap) {
			// The snapshot's membership record (its dedupe window included)
			// right behind the snapshot, before raft or the applier act on it.
			idx := snap.GetMetadata().GetIndex()
			if err := j.store.SaveMembership(idx, snap.GetData()); err != nil {
				res.err = fmt.Errorf("save membership at %d: %w", idx, err)
			}
		}
		if res.err == nil {
			res.sent = j.sendResponses(res.msgs)
		}
		msgs = msgs[n:]
		select {
		case j.appendDone <- res:
		case <-j.stopc:
			return false
		}
		if res.err != nil {
			return false
		}
	}
	return true
}

// persist writes msgs (only the first may carry a snapshot) in one batch:
// the snapshot, the entries with later appends overwriting the suffix they
// conflict with, and the newest HardState. It is synced when it holds
// entries or a snapshot, or changes the term or the vote (raft's MustSync).
func (j *Journal) persist(msgs []*raftpb.Message) error {
	var (
		hs     *raftpb.HardState
		ents   []*raftpb.Entry
		snap   *raftpb.Snapshot
		merged bool
	)
	for _, m := range msgs {
		if s := m.GetSnapshot(); !raft.IsEmptySnap(s) {
			snap = s
		}
		if es := m.GetEntries(); len(es) > 0 {
			if ents == nil {
				ents = es // raft's slice: read, never written
			} else {
				first := es[0].GetIndex()
				cut := len(ents)
				for cut > 0 && ents[cut-1].GetIndex() >= first {
					cut--
				}
				if !merged {
					ents = append(make([]*raftpb.Entry, 0, cut+len(es)), ents[:cut]...)
					merged = true
				} else {
					ents = ents[:cut]
				}
				ents = append(ents, es...)
			}
		}
		if m.Term != nil {
			hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
		}
	}
	sync := len(ents) > 0 || snap != nil ||
		(hs != nil && (hs.GetTerm() != j.persistedTerm || hs.GetVote() != j.persistedVote))
	if hs == nil && len(ents) == 0 && snap == nil {
		return nil // only messages ordered behind the earlier appends
	}
	start := j.cfg.Clock.Now()
	if err := j.store.Append(hs, ents, snap, sync); err != nil {
		return err
	}
	if sync {
		j.noteSync(j.cfg.Clock.Now().Sub(start), len(ents))
	}
	if hs != nil {
		j.persistedTerm, j.persistedVote = hs.GetTerm(), hs.GetVote()
	}
	return nil
}

// handOff applies the Ready's membership changes to raft (it needs
// ApplyConfChange before the next Ready) and queues the snapshot and the
// committed entries for the applier, in order, with the memberships the
// applier makes durable as it passes their indexes (persistMembership).
func (j *Journal) handOff(ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	var batch applyBatch
	if snap != nil {
		idx := snap.GetMetadata().GetIndex()
		m, err := decodeMembership(snap.GetData())
		if err != nil {
			return fmt.Errorf("journal: snapshot %d: %w", idx, err)
		}
		m.Index = idx
		batch.snapshot = idx
		batch.keys = m.Keys
		batch.snapMembers = m.clone() // without the keys
		j.setMembership(batch.snapMembers)
	}
	for _, e := range ents {
		if e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2 {
			batch.members = append(batch.members, j.applyConfChange(e))
		}
	}
	if len(ents) > 0 || batch.snapshot > 0 {
		batch.entries = ents
		j.applyq.push(batch)
	}
	return nil
}

// checkConfQueue matches the membership changes this leader proposed with
// the entries raft appended for them. raft silently replaces a conf change
// proposed while another one is unapplied with an empty entry; its proposer
// is told ErrBusy (it retries once entries apply) instead of waiting for an
// entry that will never come.
func (j *Journal) checkConfQueue(ents []*raftpb.Entry) {
	for _, e := range ents {
		if len(j.confQueue) == 0 {
			return
		}
		switch {
		case e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2:
			j.confQueue = j.confQueue[1:]
		case len(e.GetData()) == 0:
			key := j.confQueue[0]
			j.confQueue = j.confQueue[1:]
			j.resolve(key, applyResult{err: fmt.Errorf("%w: another membership change is pending", ErrBusy)})
		}
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
}

func (j *Journal) setSoftState(lead uint64, st raft.StateType) {
	changed := j.leader.Swap(lead) != lead
	if changed && lead != 0 {
		j.metrics.leaderChanges.Add(1)
	}
	if raft.StateType(j.state.Swap(uint32(st))) != st {
		changed = true
	}
	if changed {
		j.confQueue = nil
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
}

// memberRecord is what the applier makes durable at a membership change's
// index: the membership after it, or (m nil) nothing, with err for the
// change's proposer when the change was refused.
type memberRecord struct {
	index uint64
	m     *membership
	key   [16]byte
	err   error
}

// applyConfChange applies a committed membership change to raft and
// publishes the membership after it (peer addresses travel in the conf
// change's context); the record returned is for the applier.
func (j *Journal) applyConfChange(e *raftpb.Entry) memberRecord {
	rec := memberRecord{index: e.GetIndex()}
	cc, ctx, err := decodeConfChange(e)
	if err != nil {
		// Deterministic on every replica; raft still needs to hear about
		// it, as a no-op change.
		j.log.Error("malformed conf change ignored", "index", e.GetIndex(), "err", err)
		j.rn.ApplyConfChange(&raftpb.ConfChange{})
		return rec
	}
	rec.key = ctx.Key
	// A change that leaves no voter is in the log only if it bypassed the
	// proposal checks (an older version, a forged append): raft would panic
	// on it, here and at every restart. Every replica refuses it alike, as
	// a no-op change.
	if err := checkLeavesVoters(cc, j.rn.Status().Config.Voters.IDs()); err != nil {
		j.log.Error("membership change refused at apply", "index", e.GetIndex(), "err", err)
		j.rn.ApplyConfChange(&raftpb.ConfChange{})
		rec.err = fmt.Errorf("journal: membership change at %d refused: %w", e.GetIndex(), err)
		return rec
	}
	cs := j.rn.ApplyConfChange(cc)
	j.mu.Lock()
	m := j.mu.membership.clone()
	j.mu.Unlock()
	m.apply(e.GetIndex(), cc, ctx, cs)
	j.setMembership(m)
	rec.m = m
	return rec
}

// setMembership publishes m and updates the transport's peers (no disk:
// the applier makes it durable, persistMembership).
func (j *Journal) setMembership(m *membership) {
	j.mu.Lock()
	old := j.mu.membership
	j.mu.membership = m
	j.mu.Unlock()
	for id := range old.Members {
		if _, ok := m.Members[id]; !ok && id != j.id {
			// After this Ready's messages are sent: they include the
			// append that tells the removed node its removal committed.
			j.removedPeers = append(j.removedPeers, id)
		}
	}
	for id, mem := range m.Members {
		if id != j.id && mem.Addr != "" && old.Members[id].Addr != mem.Addr {
			j.tr.SetPeer(id, mem.Addr)
		}
	}
	if _, ok := m.Members[j.id]; !ok && m.isRemoved(j.id) {
		j.removed.Store(true)
	}
}

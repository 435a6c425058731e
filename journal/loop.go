package journal

import (
	"context"
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
// state machine stops ticks; a full apply queue only postpones the next
// Ready.
func (j *Journal) run() {
	defer close(j.loopDead)
	tickc, stopTick := j.cfg.Clock.NewTicker(j.cfg.TickInterval)
	defer stopTick()
	staleEvery := j.cfg.StaleAfter / 2
	var lastStamp int64
	var err error
	more := make(chan struct{})
	close(more)
	for err == nil {
		// With a Ready pending (a replay, a follower catching up) the select
		// does not block: events and Readys alternate.
		var readyc <-chan struct{}
		if j.rn.HasReady() && !j.applyq.full() {
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
		if j.applyq.full() || !j.rn.HasReady() {
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
	j.log.Error("journal stopped", "err", err)
	if !j.failed.CompareAndSwap(nil, &err) {
		return
	}
	failure := j.loopErr()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, ws := range j.mu.waiters {
		for _, w := range ws {
			select {
			case w <- applyResult{err: failure}:
			default: // already answered
			}
		}
	}
	close(j.mu.appliedCh)
	j.mu.appliedCh = make(chan struct{})
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

// checkConfChange refuses a removal that leaves fewer reachable voters than
// a quorum of the new configuration, and a change while one is pending.
func (j *Journal) checkConfChange(cc *raftpb.ConfChange, force bool) error {
	st := j.rn.Status()
	if cc.GetType() != raftpb.ConfChangeRemoveNode || force {
		return nil
	}
	id := cc.GetNodeId()
	voters := st.Config.Voters.IDs()
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
	if remaining == 0 {
		return fmt.Errorf("%w: node %d is the last voter", ErrUnsafeRemoval, id)
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

// step feeds inbound messages to raft.
func (j *Journal) step(in inbound) {
	var err error
	now := time.Now()
	for _, m := range in.msgs {
		j.heard[m.GetFrom()] = now
		if e := j.rn.Step(m); e != nil && !errors.Is(e, raft.ErrStepPeerNotFound) && !errors.Is(e, raft.ErrStepLocalMsg) {
			err = e
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
			j.appendq.push(m)
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
		// As Advance did: raft counts handed-off entries as applied (the
		// applier publishes what it really applied).
		j.stepLocal(apply.GetResponses())
	}
	// Peers' messages go last: the goroutine readied last runs next on this
	// P, and the followers' appends are the longest path to a commit.
	j.send(out)
	j.forgetRemovedPeers()
	return nil
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

// appendQueue is the unbounded queue of MsgStorageAppend from the loop to
// the append goroutine (raft's in-flight limits bound what it holds).
type appendQueue struct {
	mu     sync.Mutex
	msgs   []*raftpb.Message
	notify chan struct{} // cap 1
}

func newAppendQueue() *appendQueue {
	return &appendQueue{notify: make(chan struct{}, 1)}
}

func (q *appendQueue) push(m *raftpb.Message) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *appendQueue) take() []*raftpb.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs := q.msgs
	q.msgs = nil
	return msgs
}

// appendLoop is the append goroutine: it writes what the loop queued, all
// of it in one synced Pebble batch (a snapshot starts a batch of its own),
// and hands the messages back to the loop. Appends are written in the
// order raft emitted them, so a response means every earlier append is
// durable too, as raft requires.
func (j *Journal) appendLoop() {
	for {
		msgs := j.appendq.take()
		if len(msgs) == 0 {
			select {
			case <-j.appendq.notify:
				continue
			case <-j.stopc:
				return
			}
		}
		for len(msgs) > 0 {
			n := 1
			for n < len(msgs) && raft.IsEmptySnap(msgs[n].GetSnapshot()) {
				n++
			}
			res := appendResult{msgs: msgs[:n], err: j.persist(msgs[:n])}
			if res.err == nil {
				res.sent = j.sendResponses(res.msgs)
			}
			msgs = msgs[n:]
			select {
			case j.appendDone <- res:
			case <-j.stopc:
				return
			}
			if res.err != nil {
				return // the loop stops: raft must not go on
			}
		}
	}
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
	if err := j.store.Append(hs, ents, snap, sync); err != nil {
		return err
	}
	if hs != nil {
		j.persistedTerm, j.persistedVote = hs.GetTerm(), hs.GetVote()
	}
	return nil
}

// handOff applies the Ready's membership changes to raft (it needs
// ApplyConfChange before the next Ready) and queues the snapshot and the
// committed entries for the applier, in order.
func (j *Journal) handOff(ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	var batch applyBatch
	if snap != nil {
		if err := j.installSnapshotMembership(snap); err != nil {
			return err
		}
		batch.snapshot = snap.GetMetadata().GetIndex()
	}
	for _, e := range ents {
		if e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2 {
			if err := j.applyConfChange(e); err != nil {
				return err
			}
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

// applyConfChange applies a committed membership change to raft and to the
// durable membership (peer addresses travel in the conf change's context).
func (j *Journal) applyConfChange(e *raftpb.Entry) error {
	cc, ctx, err := decodeConfChange(e)
	if err != nil {
		// Deterministic on every replica; raft still needs to hear about
		// it, as a no-op change.
		j.log.Error("malformed conf change ignored", "index", e.GetIndex(), "err", err)
		j.rn.ApplyConfChange(&raftpb.ConfChange{})
		return nil
	}
	cs := j.rn.ApplyConfChange(cc)
	j.mu.Lock()
	m := j.mu.membership.clone()
	j.mu.Unlock()
	m.apply(e.GetIndex(), cc, ctx, cs)
	if err := j.store.SaveMembership(e.GetIndex(), m.encode()); err != nil {
		return fmt.Errorf("journal: save membership at %d: %w", e.GetIndex(), err)
	}
	j.setMembership(m)
	return nil
}

func (j *Journal) installSnapshotMembership(snap *raftpb.Snapshot) error {
	idx := snap.GetMetadata().GetIndex()
	m, err := decodeMembership(snap.GetData())
	if err != nil {
		return fmt.Errorf("journal: snapshot %d: %w", idx, err)
	}
	// The record keeps the image's dedupe window: this node's log starts
	// after the image, and dedupeAt seeds rebuilds from it.
	if err := j.store.SaveMembership(idx, m.encode()); err != nil {
		return fmt.Errorf("journal: save membership at %d: %w", idx, err)
	}
	keys := m.Keys
	m.Keys = nil
	j.setMembership(m)
	j.applyq.setKeys(idx, keys)
	return nil
}

// setMembership publishes m and updates the transport's peers.
func (j *Journal) setMembership(m *membership) {
	if err := j.writeMembers(m); err != nil {
		j.log.Error("save members file", "err", err)
	}
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
	if self, ok := m.Members[j.id]; ok {
		if Role(j.role.Load()) != self.Role {
			j.role.Store(uint32(self.Role))
			if err := writeKV(j.cfg.FS, j.cfg.Dir, "ROLE", [][2]string{{"role", self.Role.String()}}); err != nil {
				j.log.Error("update ROLE", "err", err)
			}
		}
	} else if m.isRemoved(j.id) {
		j.removed.Store(true)
	}
}

// applyBatch is one Ready's worth of work for the applier.
type applyBatch struct {
	snapshot uint64 // install the image at this index first (0: none)
	keys     []appliedKey
	entries  []*raftpb.Entry
	bytes    uint64
}

// applyQueue is the byte- and count-bounded queue between the raft loop and
// the applier. The loop checks full() before taking a Ready, so push never
// blocks.
type applyQueue struct {
	mu       sync.Mutex
	items    []applyBatch
	bytes    uint64
	maxBytes uint64
	maxItems int
	pendKeys map[uint64][]appliedKey
	notify   chan struct{} // applier wake-up (cap 1)
	roomc    chan struct{} // loop wake-up when space frees (cap 1)
	closed   bool
}

func newApplyQueue(maxBytes uint64, maxItems int) *applyQueue {
	return &applyQueue{maxBytes: maxBytes, maxItems: maxItems, notify: make(chan struct{}, 1), roomc: make(chan struct{}, 1), pendKeys: map[uint64][]appliedKey{}}
}

func (q *applyQueue) setKeys(idx uint64, keys []appliedKey) {
	q.mu.Lock()
	q.pendKeys[idx] = keys
	q.mu.Unlock()
}

func (q *applyQueue) push(b applyBatch) {
	for _, e := range b.entries {
		b.bytes += uint64(len(e.GetData())) + 32
	}
	q.mu.Lock()
	if b.snapshot > 0 {
		b.keys = q.pendKeys[b.snapshot]
		delete(q.pendKeys, b.snapshot)
	}
	q.items = append(q.items, b)
	q.bytes += b.bytes
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *applyQueue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes >= q.maxBytes || len(q.items) >= q.maxItems
}

func (q *applyQueue) room() <-chan struct{} { return q.roomc }

// pop takes everything queued, waiting for work; ok is false once closed.
func (q *applyQueue) pop() ([]applyBatch, bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return nil, false
		}
		if len(q.items) > 0 {
			items := q.items
			q.items = nil
			q.mu.Unlock()
			return items, true
		}
		q.mu.Unlock()
		<-q.notify
	}
}

func (q *applyQueue) done(b applyBatch) {
	q.mu.Lock()
	q.bytes -= b.bytes
	q.mu.Unlock()
	select {
	case q.roomc <- struct{}{}:
	default:
	}
}

func (q *applyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// applyLoop is the applier: it applies committed entries in log order to the
// state machine, then publishes the applied index and wakes waiters.
func (j *Journal) applyLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-j.stopc:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		items, ok := j.applyq.pop()
		if !ok {
			return
		}
		for _, b := range items {
			if j.failed.Load() == nil {
				if err := j.applyBatch(ctx, b); err != nil {
					j.fail(err)
				}
			}
			j.applyq.done(b)
		}
	}
}

func (j *Journal) applyBatch(ctx context.Context, b applyBatch) error {
	if b.snapshot > 0 && b.snapshot > j.applied.Load() {
		if j.cfg.Snapshots == nil {
			return fmt.Errorf("journal: raft snapshot %d received but Config.Snapshots is nil", b.snapshot)
		}
		if err := j.cfg.Snapshots.Install(ctx, b.snapshot); err != nil {
			return fmt.Errorf("journal: install image %d: %w", b.snapshot, err)
		}
		j.dedupe.reset(b.keys)
		j.lastImage.Store(b.snapshot)
		j.publishApplied(b.snapshot)
	}
	start := j.applied.Load()
	applied := start
	for _, e := range b.entries {
		idx := e.GetIndex()
		if idx <= applied {
			continue // replayed below the image
		}
		switch e.GetType() {
		case raftpb.EntryNormal:
			j.applyNormal(idx, e.GetData())
		default:
			if _, cctx, err := decodeConfChange(e); err == nil {
				j.applied.Store(idx)
				j.resolve(cctx.Key, applyResult{index: idx})
			}
		}
		applied = idx
	}
	if applied > start {
		j.publishApplied(applied)
	}
	return nil
}

func (j *Journal) applyNormal(idx uint64, data []byte) {
	if len(data) == 0 {
		return // the leader's empty entry of its term
	}
	env, err := decodeEnvelope(data)
	if err != nil {
		// The same bytes are skipped on every replica.
		j.log.Error("malformed entry skipped", "index", idx, "err", err)
		return
	}
	switch env.kind {
	case kindTimestamp:
		j.lastTS.Store(env.ts)
	case kindUser:
		// The applied index moves before the proposer hears: once Propose
		// returns, Status and WaitApplied on this node cover the entry too
		// (waiters on the index are woken at the end of the batch).
		if prev, dup := j.dedupe.seen(idx, env.key); dup {
			j.dedupe.add(idx, env.key, nil) // the window slides to this copy
			j.applied.Store(idx)
			j.resolve(env.key, applyResult{index: prev.applied, value: prev.value})
			return
		}
		v := j.cfg.StateMachine.Apply(idx, env.data)
		j.dedupe.add(idx, env.key, v)
		j.applied.Store(idx)
		j.resolve(env.key, applyResult{index: idx, value: v})
	}
}

func (j *Journal) resolve(key [16]byte, r applyResult) {
	if j.nwaiters.Load() == 0 {
		return // replay: nobody waits, skip the lock
	}
	j.mu.Lock()
	ws := j.mu.waiters[key]
	delete(j.mu.waiters, key)
	j.nwaiters.Add(-int64(len(ws)))
	j.mu.Unlock()
	for _, w := range ws {
		w <- r
	}
}

func (j *Journal) publishApplied(idx uint64) {
	if idx > j.applied.Load() {
		j.applied.Store(idx)
	}
	j.mu.Lock()
	close(j.mu.appliedCh)
	j.mu.appliedCh = make(chan struct{})
	j.mu.Unlock()
}

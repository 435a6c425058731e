package journal

import (
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
)

// The append path: the goroutine that writes raft's MsgStorageAppend to the
// raft store in synced batches, in the order raft emitted them, and hands
// the held-back responses to the loop (or straight to the peers).

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
		return operr.Errorf("journal: persist: %w", res.err)
	}
	var out, local []*raftpb.Message
	for _, m := range res.msgs {
		j.loop.selfVotes -= j.selfVotesIn(m)
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
		(hs != nil && (hs.GetTerm() != j.appender.persistedTerm || hs.GetVote() != j.appender.persistedVote))
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
		j.appender.persistedTerm, j.appender.persistedVote = hs.GetTerm(), hs.GetVote()
	}
	return nil
}

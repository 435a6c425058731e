package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// The applier: the goroutine that applies committed entries to the state
// machine in log order, behind the queue the raft loop fills, and makes
// each membership durable as it passes its index.

// persistMembership makes the membership as of index durable, on the
// applier before it publishes that index: the store's record (which
// MembershipAt reads for images), then ROLE and MEMBERS. The files only
// move forward: a membership no newer than the MEMBERS file (a restart
// replaying the log) leaves both alone, so a crash during a replay never
// leaves an older role or membership behind. ROLE goes first, so MEMBERS
// never names a newer index than ROLE reflects.
func (j *Journal) persistMembership(index uint64, m *membership.Membership, record bool) error {
	if record {
		if err := j.store.SaveMembership(index, m.Encode()); err != nil {
			return operr.Errorf("journal: save membership at %d: %w", index, err)
		}
	}
	if index <= j.applier.membersIndex {
		return nil
	}
	if self, ok := m.Members[j.id]; ok && Role(j.role.Load()) != self.Role {
		if err := datadir.WriteRole(j.cfg.FS, j.cfg.Dir, self.Role); err != nil {
			j.log.Error("update ROLE", "err", err)
			return nil // MEMBERS stays behind too: the next change retries both
		}
		j.role.Store(uint32(self.Role))
	}
	if err := j.writeMembers(m); err != nil {
		j.log.Error("save members file", "err", err)
		return nil
	}
	j.applier.membersIndex = index
	return nil
}

// applyBatch is one Ready's worth of work for the applier.
type applyBatch struct {
	snapshot    uint64                 // install the image at this index first (0: none)
	snapMembers *membership.Membership // the snapshot's membership (without keys)
	keys        []dedupe.Key
	entries     []*raftpb.Entry
	members     []memberRecord // one per conf change or version entry, in order
	bytes       uint64
}

// applyQueue is the queue between the raft loop and the applier, bounded
// in bytes and batches: once full(), the loop holds raft's apply
// acknowledgements back (releaseApplyAcks), so raft stops handing out
// committed entries; push never blocks. A batch pushed while the queue
// holds maxItems joins the last one, so the count stays bounded too.
type applyQueue struct {
	mu       sync.Mutex
	items    []applyBatch
	bytes    uint64
	maxBytes uint64
	maxItems int
	notify   chan struct{} // applier wake-up (cap 1)
	roomc    chan struct{} // loop wake-up when space frees (cap 1)
	closed   bool
}

func newApplyQueue(maxBytes uint64, maxItems int) *applyQueue {
	return &applyQueue{maxBytes: maxBytes, maxItems: maxItems, notify: make(chan struct{}, 1), roomc: make(chan struct{}, 1)}
}

func (q *applyQueue) push(b applyBatch) {
	for _, e := range b.entries {
		b.bytes += uint64(len(e.GetData())) + 32
	}
	q.mu.Lock()
	q.bytes += b.bytes
	if n := len(q.items); n >= q.maxItems && b.snapshot == 0 {
		last := &q.items[n-1]
		last.entries = append(last.entries, b.entries...)
		last.members = append(last.members, b.members...)
		last.bytes += b.bytes
	} else {
		q.items = append(q.items, b)
	}
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
	// Memberships up to the MEMBERS file's are durable already.
	if m, err := j.readMembers(); err != nil {
		j.log.Warn("read members file", "err", err)
	} else if m != nil {
		j.applier.membersIndex = m.Index
	}
	ctx, cancel := j.untilStop(context.Background(), 0)
	defer cancel()
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
			return operr.Errorf("journal: install image %d: %w", b.snapshot, err)
		}
		// The store's record was written with the snapshot.
		if err := j.persistMembership(b.snapshot, b.snapMembers, false); err != nil {
			return err
		}
		j.learnWindow(b.snapMembers)
		j.applier.dedupe.Reset(b.keys)
		j.installs.Add(1)
		j.lastImage.Store(b.snapshot)
		j.images.reset(b.snapshot)
		// The installed image is checked at the next mark, and confirmed
		// only then (check.go).
		j.checker.StartPending(b.snapshot)
		j.publishApplied(b.snapshot)
	}
	start := j.applied.Load()
	applied := start
	members := b.members
	for _, e := range b.entries {
		idx := e.GetIndex()
		var rec memberRecord
		if len(members) > 0 && members[0].index == idx {
			rec, members = members[0], members[1:]
		}
		if idx <= applied {
			continue // replayed below the image
		}
		halt := rec.halt
		if halt == nil && rec.m == nil && e.GetType() == raftpb.EntryNormal {
			halt = j.applyNormal(idx, e.GetData())
		}
		if c := j.corruptErr(); c != nil {
			// This member's state differs from the majority's: nothing
			// more applies here (see check.go).
			if applied > start {
				j.publishApplied(applied)
			}
			return c
		}
		switch {
		case halt != nil:
			// Nothing at or after idx is applied or marked applied.
			if applied > start {
				j.publishApplied(applied)
			}
			return halt
		case e.GetType() == raftpb.EntryNormal && rec.m == nil:
		case rec.m != nil:
			if err := j.persistMembership(idx, rec.m, true); err != nil {
				return err
			}
			j.learnWindow(rec.m)
			j.applied.Store(idx)
			j.resolve(rec.key, applyResult{index: idx})
		case rec.err != nil:
			j.applied.Store(idx)
			j.resolve(rec.key, applyResult{err: rec.err})
		}
		applied = idx
	}
	j.settlePending()
	if applied > start {
		j.publishApplied(applied)
	}
	return nil
}

// applyNormal applies a normal entry, or returns why this node cannot read
// it (and then changes nothing).
func (j *Journal) applyNormal(idx uint64, data []byte) *HaltError {
	if len(data) == 0 {
		return nil // the leader's empty entry of its term
	}
	env, err := envelope.Decode(data)
	if errors.Is(err, ErrUnknownVersion) {
		return &HaltError{Index: idx, What: "entry", Version: int(data[0]), Err: err}
	}
	if err != nil {
		// The same bytes are skipped on every replica.
		j.log.Error("malformed entry skipped", "index", idx, "err", err)
		return nil
	}
	switch env.Kind {
	case envelope.KindTimestamp:
		j.lastTS.Store(env.TS)
		j.notifyChanged()
	case envelope.KindCheck:
		if c := j.applyCheck(idx, env.Check); c != nil {
			j.raiseCorrupt(c)
		}
	case envelope.KindUser:
		// The applied index moves before the proposer hears: once Propose
		// returns, Status and WaitApplied on this node cover the entry too
		// (waiters on the index are woken at the end of the batch).
		prev, verdict := j.applier.dedupe.Judge(idx, env)
		if k := j.cfg.knobs; k != nil && k.Judged != nil && verdict != dedupe.Apply {
			k.Judged(idx, env.Key, verdict)
		}
		switch verdict {
		case dedupe.Duplicate:
			j.applier.dedupe.Record(idx, env.Key, prev, verdict, nil) // the window slides to this copy
			j.applied.Store(idx)
			j.resolve(env.Key, applyResult{index: prev.Applied, value: prev.Value, imaged: prev.Imaged})
			return nil
		case dedupe.Expired:
			j.applied.Store(idx)
			j.resolve(env.Key, applyResult{err: errExpired, since: env.Since})
			return nil
		}
		start := j.cfg.Clock.Now()
		v := j.cfg.StateMachine.Apply(idx, env.Data)
		if h, ok := v.(Halter); ok {
			if err := h.Halt(); err != nil {
				return &HaltError{Index: idx, What: "state machine entry", Err: err}
			}
		}
		j.noteApply(idx, j.cfg.Clock.Now().Sub(start))
		j.applier.dedupe.Record(idx, env.Key, prev, verdict, v)
		j.applied.Store(idx)
		j.resolve(env.Key, applyResult{index: idx, value: v})
	}
	return nil
}

// resolve tells the waiters of key how a copy of it ended. An applied copy
// is the final answer: its waiters leave the map. A refusal (r.err: a
// membership change raft dropped, a copy that expired) leaves them waiting
// for the copy a retry makes, so no answer about a later copy can fall in
// the gap before they would register again. A waiter channel (cap 2) holds
// at most one unread refusal (a newer one is dropped while one is unread:
// either tells the waiter the same) plus the final answer, so no send ever
// blocks; sends happen under j.mu, which makes that count exact.
func (j *Journal) resolve(key [16]byte, r applyResult) {
	if j.nwaiters.Load() == 0 {
		return // replay: nobody waits, skip the lock
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	head := j.mu.waiters[key]
	if r.err == nil {
		head = j.takeWaiters(key)
	}
	for w := head; w != nil; w = w.next {
		if r.err == nil || len(w.c) == 0 {
			w.c <- r
		}
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

// handOff applies the Ready's membership changes to raft (it needs
// ApplyConfChange before the next Ready) and queues the snapshot and the
// committed entries for the applier, in order, with the memberships the
// applier makes durable as it passes their indexes (persistMembership).
func (j *Journal) handOff(ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	var batch applyBatch
	if snap != nil {
		idx := snap.GetMetadata().GetIndex()
		m, err := membership.Decode(snap.GetData())
		if err != nil {
			return operr.Errorf("journal: snapshot %d: %w", idx, err)
		}
		m.Index = idx
		batch.snapshot = idx
		batch.keys = m.Keys
		batch.snapMembers = m.Clone() // without the keys
		j.loop.confBase = batch.snapMembers
		j.setMembership(batch.snapMembers)
	}
	for _, e := range ents {
		if e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2 {
			batch.members = append(batch.members, j.applyConfChange(e))
			j.maybeRaiseVersion() // the change may have removed the last older member
		} else if isVersionEntry(e) {
			batch.members = append(batch.members, j.applyVersionEntry(e))
		}
	}
	if n := len(ents); n > 0 {
		j.settlePendingVersion(ents[n-1].GetIndex())
	}
	if len(ents) > 0 || batch.snapshot > 0 {
		batch.entries = ents
		j.applyq.push(batch)
	}
	if len(ents) > 0 {
		j.passFence(ents[len(ents)-1].GetIndex())
	}
	return nil
}

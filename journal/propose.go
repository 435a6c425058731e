package journal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/envelope"
)

// Propose appends data to the log through the leader and returns once the
// entry is applied on this node, with its index and the value the local
// StateMachine.Apply returned: a write is visible to reads on the node that
// made it (read-your-writes on every node). On a non-leader the proposal is
// forwarded to the leader; leader changes are retried up to
// Config.ForwardRetries times with the same idempotency key. When no leader
// can be reached (quorum loss) the error wraps ErrNoLeader and the
// context's error once ctx ends.
//
// An error means the write did not and will not apply, unless it wraps
// ErrOutcomeUnknown: a copy reached raft and may apply yet (or applied
// inside an image this node installed).
//
// Propose uses a random idempotency key; ProposeWithKey takes the caller's.
func (j *Journal) Propose(ctx context.Context, data []byte) (index uint64, value any, err error) {
	return j.proposeData(ctx, data, j.keys.next())
}

// ProposeWithKey is Propose with the caller's idempotency key. A proposal
// retried with the same key (for example after a lost acknowledgement) is
// applied once as long as each copy reaches the log within
// Config.DedupeWindow entries of the copy before it (the window slides with
// every copy); the retry returns the applied copy's index (and its value if
// this node applied it in this process). The copies one call makes itself
// (after a leader change, or a forward that was not applied in time) apply
// once however far apart they land: a copy that lands more than a window
// after the call began is not applied, and the call proposes again.
func (j *Journal) ProposeWithKey(ctx context.Context, key [16]byte, data []byte) (index uint64, value any, err error) {
	return j.proposeData(ctx, data, key)
}

// LeaderTerm returns the raft term this node knows and whether it is the
// leader in it (heartbeat.Journal).
func (j *Journal) LeaderTerm() (term uint64, leader bool) {
	st := j.Status()
	return st.Term, st.IsLeader()
}

// proposeData is Propose with the idempotency key key.
func (j *Journal) proposeData(ctx context.Context, data []byte, key [16]byte) (index uint64, value any, err error) {
	if err := j.checkEntrySize(len(data)); err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, operr.Errorf("journal: propose: %w", err)
	}
	if err := j.checkProposal(data); err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, operr.Errorf("journal: propose: %w", err)
	}
	if guard := j.cfg.ProposalGuard; guard != nil {
		if err := guard(ctx, data); err != nil {
			j.metrics.proposalsFailed.Add(1)
			return 0, nil, operr.Errorf("journal: propose: %w: %w", ErrInvalidProposal, err)
		}
	}
	if err := cmp.Or(j.writable(), j.checker.WriteRefusal()); err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, operr.Errorf("journal: propose: %w", err)
	}
	r, err := j.submitData(ctx, key, data)
	if err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, operr.Errorf("journal: propose: %w", err)
	}
	return r.index, r.value, nil
}

func (j *Journal) electionTimeout() time.Duration {
	return time.Duration(j.cfg.ElectionTicks) * j.cfg.TickInterval
}

// errExpired is a copy of a user entry that landed more than DedupeWindow
// indexes after its since (dedupe.Window.Judge): no copy of it applies any more,
// so the proposer proposes again with a newer since.
var errExpired = fmt.Errorf("%w: the proposal reached the log more than Config.DedupeWindow entries after it was made", ErrBusy)

// errBeyondWindow is a leader's refusal of a copy of a user entry that
// would land more than DedupeWindow indexes after its since, behind an
// unsynced tail that long (landsAt): it never reaches the log. Once no
// copy carrying that since can apply, the proposer proposes again with a
// newer one, after the tail has become durable.
var errBeyondWindow = fmt.Errorf("%w: the proposal would reach the log more than Config.DedupeWindow entries after it was made, behind the entries the leader's disk has not yet made durable", ErrBusy)

// checkEntrySize refuses data over Config.MaxEntryBytes: no retry could
// commit it, since followers refuse the frame that would carry it.
func (j *Journal) checkEntrySize(n int) error {
	if uint64(n) > j.cfg.MaxEntryBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d (Config.MaxEntryBytes)", ErrTooLarge, n, j.cfg.MaxEntryBytes)
	}
	return nil
}

// checkProposal asks the state machine, when it is a ProposalChecker,
// whether data is an entry it reads (ErrInvalidProposal otherwise).
func (j *Journal) checkProposal(data []byte) error {
	c, ok := j.cfg.StateMachine.(ProposalChecker)
	if !ok {
		return nil
	}
	if err := c.CheckProposal(data); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidProposal, err)
	}
	return nil
}

// checkForwarded admits a proposal another node forwarded inside raft's
// stream only if it holds user entries, consistency check reports of
// the forwarding member's own, or an alarm clear (Journal.ClearAlarm):
// membership changes go through
// HandleForward (and its safety checks), timestamps and check marks come
// from the leader alone.
func (j *Journal) checkForwarded(m *raftpb.Message) error {
	for _, e := range m.GetEntries() {
		if e.GetType() != raftpb.EntryNormal {
			return fmt.Errorf("%w: forwarded proposal from node %d holds a %v entry", ErrMalformed, m.GetFrom(), e.GetType())
		}
		env, err := envelope.Decode(e.GetData())
		if err == nil && env.Kind == envelope.KindCheck && (env.Check.Op == envelope.CheckReport && env.Check.From == m.GetFrom() || env.Check.Op == envelope.CheckClear) {
			continue
		}
		if err != nil || env.Kind != envelope.KindUser {
			return fmt.Errorf("%w: forwarded proposal from node %d holds an entry that is not a user entry", ErrMalformed, m.GetFrom())
		}
		if err := j.checkEntrySize(len(env.Data)); err != nil {
			return fmt.Errorf("forwarded proposal from node %d: %w", m.GetFrom(), err)
		}
	}
	return nil
}

// admitForwarded holds the proposals other nodes forwarded inside raft's
// stream (MsgProp) to what this node takes from a local proposer: it drops
// the entries the node does not take now (ErrNoSpace, its state machine
// refuses them, ...), and the MsgProp left with none. The rest of msgs is
// delivered. The proposer hears nothing of a dropped entry (raft has no
// answer to a MsgProp): its wait runs out as for a proposal the network
// lost. msgs is not modified; a message with entries dropped is copied.
func (j *Journal) admitForwarded(msgs []*raftpb.Message) []*raftpb.Message {
	var out []*raftpb.Message // nil until something is dropped
	for i, m := range msgs {
		keep := m
		if m.GetType() == raftpb.MsgProp {
			keep = j.admitProposal(m)
		}
		if keep != m && out == nil {
			out = append(make([]*raftpb.Message, 0, len(msgs)), msgs[:i]...)
		}
		if out != nil && keep != nil {
			out = append(out, keep)
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// admitProposal returns m, a copy of m without the entries this node does
// not take, or nil when it takes none (checkForwarded has admitted m: its
// entries are user entries).
func (j *Journal) admitProposal(m *raftpb.Message) *raftpb.Message {
	writeErr := j.writable()
	var kept []*raftpb.Entry
	var why error
	for i, e := range m.GetEntries() {
		err := writeErr
		if env, _ := envelope.Decode(e.GetData()); err == nil && env.Kind != envelope.KindCheck {
			err = cmp.Or(j.checker.WriteRefusal(), j.checkProposal(env.Data))
		}
		if err == nil {
			if kept != nil {
				kept = append(kept, e)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]*raftpb.Entry, 0, len(m.GetEntries())), m.GetEntries()[:i]...)
		}
		why = err
	}
	if why == nil {
		return m
	}
	dropped := len(m.GetEntries()) - len(kept)
	if ok, n := j.metrics.refusedForward.Allow(j.cfg.Clock.Now()); ok {
		j.log.Warn("dropped proposals forwarded by a member", "from", m.GetFrom(), "entries", dropped, "err", why, "suppressed", n)
	}
	if len(kept) == 0 {
		return nil
	}
	c := proto.Clone(m).(*raftpb.Message)
	c.Entries = kept
	return c
}

// forever is a wait without a deadline of its own (the context still ends
// it).
const forever time.Duration = 1 << 62

func retryable(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) ||
		errors.Is(err, ErrUnreachable) || errors.Is(err, ErrBusy)
}

// ctxErr wraps the context's error, and ErrNoLeader when that is why.
func (j *Journal) ctxErr(ctx context.Context, last error) error {
	if errors.Is(last, ErrNoLeader) || errors.Is(last, ErrUnreachable) || (last == nil && j.leader.Load() == 0) {
		return fmt.Errorf("%w: %w", ErrNoLeader, context.Cause(ctx))
	}
	if last != nil {
		return fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), last)
	}
	return context.Cause(ctx)
}

// proposeLocal hands p to the raft loop and waits until raft accepted or
// refused it.
func (j *Journal) proposeLocal(ctx context.Context, p *proposal) error {
	p.done = make(chan error, 1)
	if err := j.enqueueProposal(ctx, p); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		return err
	case <-j.loopDead:
		return j.loopErr()
	}
}

// enqueueProposal hands p to the raft loop.
func (j *Journal) enqueueProposal(ctx context.Context, p *proposal) error {
	select {
	case j.propc <- p:
		return nil
	case <-ctx.Done():
		return j.ctxErr(ctx, nil)
	case <-j.done:
		return ErrClosed
	case <-j.loopDead:
		return j.loopErr()
	}
}

// sinceNow is the since of a new proposal's copies: an index every entry
// appended from now on lands after (applied and durably committed entries
// are committed cluster-wide, so any leader's log holds them).
func (j *Journal) sinceNow() uint64 {
	return max(j.committed.Load(), j.applied.Load())
}

// handleForward is the journal's Receiver.HandleForward (see receiver): it
// proposes a forwarded entry on this node, which must lead, and returns once
// the entry is applied here.
func (j *Journal) handleForward(ctx context.Context, req *ForwardRequest) (*ForwardResponse, error) {
	if j.state.Load() != uint32(raft.StateLeader) {
		return nil, j.notLeaderErr()
	}
	var p *proposal
	switch req.Kind {
	case ForwardData:
		if err := j.checkEntrySize(len(req.Data)); err != nil {
			return nil, err
		}
		if err := j.checkProposal(req.Data); err != nil {
			return nil, err
		}
		if err := cmp.Or(j.writable(), j.checker.WriteRefusal()); err != nil {
			return nil, err
		}
		p = &proposal{data: envelope.EncodeUser(req.Key, req.Data)}
	case ForwardConfChange:
		cc := &raftpb.ConfChange{}
		if err := proto.Unmarshal(req.Data, cc); err != nil {
			return nil, fmt.Errorf("%w: forwarded conf change: %w", ErrMalformed, err)
		}
		p = &proposal{cc: cc, force: req.Force}
	default:
		return nil, fmt.Errorf("%w: forward kind %d", ErrMalformed, req.Kind)
	}
	var w waiter
	j.addWaiter(req.Key, &w)
	defer j.removeWaiter(req.Key, &w)
	lc := j.Leadership()
	if err := j.proposeLocal(ctx, p); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return nil, j.notLeaderErr()
		}
		return nil, err
	}
	select {
	case r := <-w.c:
		if r.err != nil {
			return nil, r.err
		}
		return &ForwardResponse{Index: r.index}, nil
	case <-lc:
		return nil, j.notLeaderErr()
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-j.done:
		return nil, ErrClosed
	}
}

func (j *Journal) notLeaderErr() error {
	if l := j.leader.Load(); l != 0 && l != j.id {
		return fmt.Errorf("%w (leader is %d)", ErrNotLeader, l)
	}
	return fmt.Errorf("%w: %w", ErrNotLeader, ErrNoLeader)
}

// WaitApplied waits until this node has applied index.
func (j *Journal) WaitApplied(ctx context.Context, index uint64) error {
	for {
		j.mu.Lock()
		ch := j.mu.appliedCh
		j.mu.Unlock()
		if j.applied.Load() >= index {
			return nil
		}
		if e := j.failed.Load(); e != nil {
			return *e
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return operr.Errorf("journal: wait for index %d (applied %d): %w", index, j.applied.Load(), context.Cause(ctx))
		case <-j.done:
			return ErrClosed
		}
	}
}

// do runs f on the raft loop and waits for it to have run.
func (j *Journal) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	op := func() { f(); close(done) }
	select {
	case j.opc <- op:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-j.done:
		return ErrClosed
	case <-j.loopDead:
		return j.loopErr()
	}
	select {
	case <-done:
		return nil
	case <-j.loopDead:
		// The loop stopped; it never runs op after closing loopDead.
		select {
		case <-done:
			return nil
		default:
			return j.loopErr()
		}
	}
}

// receive is the journal's Receiver.Receive (see receiver): it steps inbound
// raft messages. For a snapshot message the image is made durable
// (Snapshots.Fetch) before raft sees the message, and Receive returns once
// raft has stepped it.
func (j *Journal) receive(ctx context.Context, msgs []*raftpb.Message) error {
	fenced := j.fenceUntil.Load() != 0 // before the membership: see fenceUntil
	j.mu.Lock()
	m := j.mu.membership
	j.mu.Unlock()
	for _, msg := range msgs {
		if msg.GetTo() != j.id {
			return fmt.Errorf("%w: message for node %d delivered to node %d", ErrMalformed, msg.GetTo(), j.id)
		}
		if m.IsRemoved(msg.GetFrom()) {
			j.refusedRemoved.Add(1)
			return fmt.Errorf("%w: node %d is no longer a member (node %d applied its removal)", ErrRemoved, msg.GetFrom(), j.id)
		}
		if fenced && msg.GetFrom() != j.id {
			j.refusedRemoved.Add(1)
			return fmt.Errorf("%w: node %d is no longer a member (node %d was forced to lead a new cluster alone; its removal is in the log)", ErrRemoved, msg.GetFrom(), j.id)
		}
		err := checkMessage(msg, j.id)
		if err == nil {
			// The loop checks again against its own view (the log may have
			// been cut since); this tells the sender.
			if last := j.lastIndexPub.Load(); last > 0 {
				err = checkAgainstLog(msg, last)
			}
		}
		if err == nil && msg.GetType() == raftpb.MsgProp {
			err = j.checkForwarded(msg)
		}
		if err != nil {
			j.refuse(err)
			return err
		}
	}
	if msgs = j.admitForwarded(msgs); len(msgs) == 0 {
		return nil
	}
	in := inbound{msgs: msgs}
	if len(msgs) == 1 && msgs[0].GetType() == raftpb.MsgSnap {
		msg := msgs[0]
		if j.cfg.Snapshots == nil {
			return fmt.Errorf("journal: snapshot from node %d: no Snapshots hook configured", msg.GetFrom())
		}
		addr := j.peerAddr(m, msg.GetFrom())
		if addr == "" {
			return fmt.Errorf("%w: snapshot from node %d with no known address", ErrUnknownMember, msg.GetFrom())
		}
		idx := msg.GetSnapshot().GetMetadata().GetIndex()
		if err := j.cfg.Snapshots.Fetch(ctx, addr, idx); err != nil {
			return operr.Errorf("journal: fetch image %d from %s: %w", idx, addr, err)
		}
		in.done = make(chan error, 1)
	} else {
		for _, msg := range msgs {
			if msg.GetType() == raftpb.MsgSnap {
				return fmt.Errorf("%w: snapshot message batched with others", ErrMalformed)
			}
		}
	}
	if err := j.enqueue(ctx, in); err != nil {
		if in.done != nil {
			j.releaseFetched(in.msgs[0].GetSnapshot().GetMetadata().GetIndex())
		}
		return err
	}
	if in.done == nil {
		return nil
	}
	select {
	case err := <-in.done:
		return err
	case <-j.loopDead:
		select {
		case err := <-in.done:
			return err
		default:
			return j.loopErr()
		}
	}
}

// enqueue hands inbound messages to the raft loop.
func (j *Journal) enqueue(ctx context.Context, in inbound) error {
	select {
	case j.recvc <- in:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-j.done:
		return ErrClosed
	case <-j.loopDead:
		return j.loopErr()
	}
}

// reportUnreachable is the journal's Receiver.ReportUnreachable (see
// receiver).
func (j *Journal) reportUnreachable(id uint64) {
	select {
	case j.reportc <- report{id: id}:
	default: // a hint; raft probes again anyway
	}
}

// reportRemoved is the journal's Receiver.ReportRemoved (see receiver). A
// peer says so only once it applied the committed change that removed this
// node, so the node counts itself removed from then on.
func (j *Journal) reportRemoved(id uint64) {
	if !j.removed.Swap(true) {
		j.log.Warn("a member refused this node's messages: this node was removed from the cluster", "by", id)
		j.notifyChanged()
	}
}

// reportSnapshot is the journal's Receiver.ReportSnapshot (see receiver).
func (j *Journal) reportSnapshot(id uint64, ok bool) {
	select {
	case j.reportc <- report{id: id, snapshot: true, ok: ok}:
	case <-j.done:
	case <-j.loopDead:
	}
}

package journal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ProposeOption is an optional argument of Propose.
type ProposeOption func(*proposeOptions)

type proposeOptions struct {
	key    [16]byte
	hasKey bool
}

// WithKey sets the proposal's idempotency key. A proposal retried with the
// same key (for example after a lost acknowledgement) is applied once as
// long as each copy reaches the log within Config.DedupeWindow entries of
// the copy before it (the window slides with every copy); the retry returns
// the applied copy's index (and its value if this node applied it in this
// process). Without WithKey a random key is used. The copies one Propose
// call makes itself (after a leader change, or a forward that was not
// applied in time) apply once however far apart they land: a copy that
// lands more than a window after the call began is not applied, and the
// call proposes again.
func WithKey(key [16]byte) ProposeOption {
	return func(o *proposeOptions) { o.key, o.hasKey = key, true }
}

// Propose appends data to the log through the leader and returns once the
// entry is applied on this node, with its index and the value the local
// StateMachine.Apply returned: a write is visible to reads on the node that
// made it (read-your-writes on every node). On a non-leader the proposal is
// forwarded to the leader; leader changes are retried up to
// Config.ForwardRetries times with the same idempotency key. When no leader
// can be reached (quorum loss) the error wraps ErrNoLeader and the
// context's error once ctx ends.
func (j *Journal) Propose(ctx context.Context, data []byte, opts ...ProposeOption) (index uint64, value any, err error) {
	var o proposeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := j.checkEntrySize(len(data)); err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, fmt.Errorf("journal: propose: %w", err)
	}
	if err := j.writable(); err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, fmt.Errorf("journal: propose: %w", err)
	}
	if !o.hasKey {
		o.key = uuid.New()
	}
	// Every copy this call proposes (re-proposals after a lost forward or
	// a leader change) carries the same since, until one expires.
	var since uint64
	var env []byte
	r, err := j.submit(ctx, o.key,
		func(s uint64) *proposal {
			if s != since || env == nil {
				since, env = s, encodeUserSince(o.key, s, data)
			}
			return &proposal{data: env}
		},
		&ForwardRequest{Kind: ForwardData, Key: o.key, Data: data})
	if err != nil {
		j.metrics.proposalsFailed.Add(1)
		return 0, nil, fmt.Errorf("journal: propose: %w", err)
	}
	return r.index, r.value, nil
}

func (j *Journal) electionTimeout() time.Duration {
	return time.Duration(j.cfg.ElectionTicks) * j.cfg.TickInterval
}

// errExpired is a copy of a user entry that landed more than DedupeWindow
// indexes after its since (dedupe.judge): no copy of it applies any more,
// so the proposer proposes again with a newer since.
var errExpired = fmt.Errorf("%w: the proposal reached the log more than Config.DedupeWindow entries after it was made", ErrBusy)

// submit gets a proposal applied locally: proposed here when this node
// leads, forwarded otherwise, retried on leader changes. local builds the
// proposal for the since its copies carry (a data proposal's; the
// smallest index a copy can land after): since changes only when a copy
// with the current one expired, and then no copy with the old one can
// apply any more (a later copy lands later still, an earlier one would
// have been heard of first).
func (j *Journal) submit(ctx context.Context, key [16]byte, local func(since uint64) *proposal, fwd *ForwardRequest) (applyResult, error) {
	w := j.addWaiter(key)
	defer func() { j.removeWaiter(key, w) }()
	since := j.sinceNow()
	var lastErr, refused error
	// wait waits for the apply; refusedc (a quiet proposal's done) and
	// dead (the local loop's end) only for a proposal made here.
	wait := func(lc <-chan struct{}, d time.Duration, refusedc <-chan error, dead <-chan struct{}) (applyResult, bool, error) {
		var timeout <-chan time.Time // d == forever: no timer at all
		if d < forever {
			tc, stop := j.cfg.Clock.NewTimer(d)
			defer stop()
			timeout = tc
		}
		refused = nil
		for {
			select {
			case err := <-refusedc:
				refused = err
			case <-dead:
				return applyResult{}, false, j.loopErr()
			case r := <-w:
				if errors.Is(r.err, errExpired) && r.since != since {
					continue // a copy made with an older since: long dead
				}
				if r.err != nil {
					// The leader refused the proposal after accepting it
					// (ErrBusy), or its copy expired: the next attempt.
					refused = r.err
					return applyResult{}, false, nil
				}
				return r, true, nil
			case <-lc:
			case <-timeout:
			case <-ctx.Done():
				return applyResult{}, false, j.ctxErr(ctx, lastErr)
			case <-j.done:
				return applyResult{}, false, ErrClosed
			}
			return applyResult{}, false, nil
		}
	}
	// proposeHere hands a proposal to the local raft loop (forward: raft
	// sends it on to the leader) and waits up to d for its apply. done
	// means return (r, err); otherwise err is why another attempt is due
	// (nil when nothing was heard: the caller names that).
	copies := 0
	proposeHere := func(lc <-chan struct{}, forward bool, d time.Duration) (r applyResult, done bool, err error) {
		if copies++; copies > 1 && j.cfg.knobs != nil && j.cfg.knobs.beforeRepropose != nil {
			j.cfg.knobs.beforeRepropose(key)
		}
		p := local(since)
		p.done, p.quiet, p.forward = make(chan error, 1), true, forward
		if err := j.enqueueProposal(ctx, p); err != nil {
			return applyResult{}, false, err
		}
		r, ok, werr := wait(lc, d, p.done, j.loopDead)
		switch {
		case werr != nil || ok:
			return r, true, werr
		}
		return applyResult{}, false, refused
	}
	// Attempts that reached a leader are bounded by ForwardRetries; waiting
	// for an election is bounded by 2 × ForwardRetries election timeouts
	// (and by ctx).
	noLeaderDeadline := j.cfg.Clock.Now().Add(2 * time.Duration(j.cfg.ForwardRetries) * j.electionTimeout())
	for attempt := 0; attempt < j.cfg.ForwardRetries; attempt++ {
		select {
		case <-j.done:
			return applyResult{}, ErrClosed
		default:
		}
		if j.failed.Load() != nil {
			return applyResult{}, j.loopErr() // nothing applies here any more
		}
		lc := j.Leadership()
		leader := j.leader.Load()
		var err error
		switch {
		case leader == j.id && j.state.Load() == uint32(raft.StateLeader):
			// Wait for the local apply; a leader change means the entry
			// may be lost: retry (the key makes that safe).
			r, done, perr := proposeHere(lc, false, forever)
			if done {
				return r, perr
			}
			err = cmp.Or(perr, ErrNotLeader)
		case leader == 0 || leader == j.id:
			err = ErrNoLeader
			if j.cfg.Clock.Now().Before(noLeaderDeadline) {
				attempt-- // an election is not a failed attempt
			}
		case fwd.Kind == ForwardData:
			// raft forwards it to the leader in its message stream. Nobody
			// answers for it but the local apply of its key: a leader
			// change, or no apply within two election timeouts (the leader
			// may drop a forwarded proposal silently), means another try.
			j.metrics.proposalsForwarded.Add(1)
			r, done, perr := proposeHere(lc, true, 2*j.electionTimeout())
			if done {
				return r, perr
			}
			err = perr
			if err == nil {
				err = fmt.Errorf("%w: a proposal forwarded to node %d was not applied in time", ErrUnreachable, leader)
			}
		default:
			var resp *ForwardResponse
			j.metrics.proposalsForwarded.Add(1)
			resp, err = j.tr.Forward(ctx, leader, fwd)
			if err == nil {
				_ = resp
				r, ok, werr := wait(nil, forever, nil, nil)
				if ok || werr != nil {
					return r, werr
				}
				err = refused
				if err == nil {
					err = ErrNotLeader
				}
			}
		}
		lastErr = err
		if errors.Is(err, errExpired) {
			since = j.sinceNow() // at once: no copy with the old one applies
			continue
		}
		if !retryable(err) {
			return applyResult{}, err
		}
		if errors.Is(err, ErrBusy) && j.cfg.Clock.Now().Before(noLeaderDeadline) {
			// Back-pressure (a pending membership change, a full
			// uncommitted tail) clears as entries apply: retry then,
			// without spending an attempt.
			attempt--
			j.mu.Lock()
			ac := j.mu.appliedCh
			j.mu.Unlock()
			tc, stop := j.cfg.Clock.NewTimer(j.cfg.TickInterval)
			select {
			case r := <-w:
				stop()
				if r.err == nil {
					return r, nil
				}
			case <-ac:
			case <-tc:
			case <-ctx.Done():
				stop()
				return applyResult{}, j.ctxErr(ctx, lastErr)
			case <-j.done:
				stop()
				return applyResult{}, ErrClosed
			}
			stop()
			continue
		}
		if ctx.Err() != nil {
			return applyResult{}, j.ctxErr(ctx, lastErr)
		}
		// Give the cluster time to elect or the new leader time to be heard.
		if r, ok, err := wait(lc, j.electionTimeout(), nil, nil); ok || err != nil {
			return r, err
		}
	}
	return applyResult{}, fmt.Errorf("gave up after %d attempts: %w", j.cfg.ForwardRetries, lastErr)
}

// checkForwarded admits a proposal another node forwarded inside raft's
// stream only if it holds user entries: membership changes go through
// HandleForward (and its safety checks), timestamps come from the leader
// alone.
// checkEntrySize refuses data over Config.MaxEntryBytes: no retry could
// commit it, since followers refuse the frame that would carry it.
func (j *Journal) checkEntrySize(n int) error {
	if uint64(n) > j.cfg.MaxEntryBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d (Config.MaxEntryBytes)", ErrTooLarge, n, j.cfg.MaxEntryBytes)
	}
	return nil
}

func (j *Journal) checkForwarded(m *raftpb.Message) error {
	for _, e := range m.GetEntries() {
		if e.GetType() != raftpb.EntryNormal {
			return fmt.Errorf("%w: forwarded proposal from node %d holds a %v entry", ErrMalformed, m.GetFrom(), e.GetType())
		}
		env, err := decodeEnvelope(e.GetData())
		if err != nil || env.kind != kindUser {
			return fmt.Errorf("%w: forwarded proposal from node %d holds an entry that is not a user entry", ErrMalformed, m.GetFrom())
		}
		if err := j.checkEntrySize(len(env.data)); err != nil {
			return fmt.Errorf("forwarded proposal from node %d: %w", m.GetFrom(), err)
		}
	}
	return nil
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

// addWaiter registers a channel for the answers about key (see resolve).
func (j *Journal) addWaiter(key [16]byte) chan applyResult {
	w := make(chan applyResult, 2)
	j.mu.Lock()
	j.mu.waiters[key] = append(j.mu.waiters[key], w)
	j.nwaiters.Add(1)
	j.mu.Unlock()
	return w
}

func (j *Journal) removeWaiter(key [16]byte, w chan applyResult) {
	j.mu.Lock()
	defer j.mu.Unlock()
	ws := j.mu.waiters[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			j.nwaiters.Add(-1)
			break
		}
	}
	if len(ws) == 0 {
		delete(j.mu.waiters, key)
	} else {
		j.mu.waiters[key] = ws
	}
}

// HandleForward implements Receiver: it proposes a forwarded entry on this
// node, which must lead, and returns once the entry is applied here.
func (j *Journal) HandleForward(ctx context.Context, req *ForwardRequest) (*ForwardResponse, error) {
	if j.state.Load() != uint32(raft.StateLeader) {
		return nil, j.notLeaderErr()
	}
	var p *proposal
	switch req.Kind {
	case ForwardData:
		if err := j.checkEntrySize(len(req.Data)); err != nil {
			return nil, err
		}
		if err := j.writable(); err != nil {
			return nil, err
		}
		p = &proposal{data: encodeUser(req.Key, req.Data)}
	case ForwardConfChange:
		cc := &raftpb.ConfChange{}
		if err := proto.Unmarshal(req.Data, cc); err != nil {
			return nil, fmt.Errorf("%w: forwarded conf change: %w", ErrMalformed, err)
		}
		p = &proposal{cc: cc, force: req.Force}
	default:
		return nil, fmt.Errorf("%w: forward kind %d", ErrMalformed, req.Kind)
	}
	w := j.addWaiter(req.Key)
	defer j.removeWaiter(req.Key, w)
	lc := j.Leadership()
	if err := j.proposeLocal(ctx, p); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return nil, j.notLeaderErr()
		}
		return nil, err
	}
	select {
	case r := <-w:
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
			return fmt.Errorf("journal: wait for index %d (applied %d): %w", index, j.applied.Load(), context.Cause(ctx))
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

// Receive implements Receiver: it steps inbound raft messages. For a
// snapshot message the image is made durable (Snapshots.Fetch) before raft
// sees the message, and Receive returns once raft has stepped it.
func (j *Journal) Receive(ctx context.Context, msgs []*raftpb.Message) error {
	j.mu.Lock()
	m := j.mu.membership
	j.mu.Unlock()
	for _, msg := range msgs {
		if msg.GetTo() != j.id {
			return fmt.Errorf("%w: message for node %d delivered to node %d", ErrMalformed, msg.GetTo(), j.id)
		}
		if m.isRemoved(msg.GetFrom()) {
			j.refusedRemoved.Add(1)
			return fmt.Errorf("%w: node %d was removed from the cluster", ErrUnknownMember, msg.GetFrom())
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
	in := inbound{msgs: msgs}
	if len(msgs) == 1 && msgs[0].GetType() == raftpb.MsgSnap {
		msg := msgs[0]
		if j.cfg.Snapshots == nil {
			return fmt.Errorf("journal: snapshot from node %d: no Snapshots hook configured", msg.GetFrom())
		}
		addr := m.Members[msg.GetFrom()].Addr
		if addr == "" {
			return fmt.Errorf("%w: snapshot from node %d with no known address", ErrUnknownMember, msg.GetFrom())
		}
		idx := msg.GetSnapshot().GetMetadata().GetIndex()
		if err := j.cfg.Snapshots.Fetch(ctx, addr, idx); err != nil {
			return fmt.Errorf("journal: fetch image %d from %s: %w", idx, addr, err)
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

// ReportUnreachable implements Receiver.
func (j *Journal) ReportUnreachable(id uint64) {
	select {
	case j.reportc <- report{id: id}:
	default: // a hint; raft probes again anyway
	}
}

// ReportSnapshot implements Receiver.
func (j *Journal) ReportSnapshot(id uint64, ok bool) {
	select {
	case j.reportc <- report{id: id, snapshot: true, ok: ok}:
	case <-j.done:
	case <-j.loopDead:
	}
}

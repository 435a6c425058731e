package journal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/metatree/metatree/journal/internal/envelope"
)

// submit gets a proposal applied locally: proposed here when this node
// leads, forwarded otherwise, retried on leader changes. local builds the
// proposal for the since its copies carry (a data proposal's; the
// smallest index a copy can land after): since changes only when a copy
// with the current one expired, and then no copy with the old one can
// apply any more (a later copy lands later still, an earlier one would
// have been heard of first).
func (j *Journal) submit(ctx context.Context, key [16]byte, local func(since uint64) *proposal, fwd ForwardRequest) (applyResult, error) {
	s := &submission{local: local}
	j.startSubmission(ctx, s, key, fwd)
	return s.run()
}

// submitData is submit of a user entry, data under key: its copies are
// envelopes (envelope.EncodeUserSince) that submission.proposal builds, so
// the submission is the only record the call allocates besides the
// envelope.
func (j *Journal) submitData(ctx context.Context, key [16]byte, data []byte) (applyResult, error) {
	s := &submission{data: data}
	j.startSubmission(ctx, s, key, ForwardRequest{Kind: ForwardData, Key: key, Data: data})
	return s.run()
}

// run makes the submission's attempts (see submit).
func (s *submission) run() (applyResult, error) {
	j, ctx := s.j, s.ctx
	defer s.finish()
	for attempt := 0; attempt < j.cfg.ForwardRetries; attempt++ {
		if err := j.takesProposals(); err != nil {
			return s.settle(err, false)
		}
		lc := j.stirred()
		r, out, err := s.try(lc)
		switch out {
		case finished:
			if err != nil {
				return s.settle(err, false)
			}
			return r, nil
		case retryFree:
			attempt-- // an election is not a failed attempt
		}
		s.lastErr = err
		if errors.Is(err, errExpired) {
			if j.installs.Load() != s.installs {
				// An earlier copy may have applied inside the image:
				// proposing again under a newer since could apply the
				// proposal twice.
				return applyResult{}, fmt.Errorf("%w: a copy of the proposal expired after this node installed an image, which may hold an earlier copy", ErrOutcomeUnknown)
			}
			s.since = j.sinceNow() // at once: no copy with the old one applies
			s.inLog = false
			continue
		}
		if errors.Is(err, errBeyondWindow) {
			// The leader's unsynced tail is longer than the window: it
			// clears as the leader's fsyncs return, however slow, so
			// waiting for it spends no attempt (ctx bounds it, as it
			// bounds the wait for a copy in the log).
			if !s.inLog || s.dead(j.applied.Load()) {
				// No copy carrying since can apply (none reached raft, or
				// every index one could apply at is applied here): the
				// next copy carries a newer one, which lands within its
				// window once the tail is durable.
				s.since = j.sinceNow()
				s.inLog = false
			}
			attempt--
			if r, done, err := s.awaitRoom(); done {
				if err != nil {
					return s.settle(err, false)
				}
				return r, nil
			}
			continue
		}
		if !retryable(err) {
			return s.settle(err, false)
		}
		if errors.Is(err, ErrBusy) && s.beforeDeadline() {
			// Back-pressure (a pending membership change, a full
			// uncommitted tail) clears as entries apply: retry then,
			// without spending an attempt.
			attempt--
			if r, done, err := s.awaitRoom(); done {
				if err != nil {
					return s.settle(err, false)
				}
				return r, nil
			}
			continue
		}
		if ctx.Err() != nil {
			return s.settle(j.ctxErr(ctx, s.lastErr), false)
		}
		// Give the cluster time to elect or the new leader time to be heard.
		if r, ok, err := s.wait(lc, j.electionTimeout(), nil); ok || err != nil {
			if err != nil {
				return s.settle(err, false)
			}
			return r, nil
		}
	}
	return s.settle(fmt.Errorf("gave up after %d attempts: %w", j.cfg.ForwardRetries, s.lastErr), true)
}

// takesProposals is nil while the journal can still apply a proposal made
// here, and otherwise the error a proposer gets.
func (j *Journal) takesProposals() error {
	select {
	case <-j.done:
		return ErrClosed
	default:
	}
	if j.failed.Load() != nil {
		return j.loopErr() // nothing applies here any more
	}
	return nil
}

// submission is the state of one submit call across its attempts.
type submission struct {
	j   *Journal
	ctx context.Context
	key [16]byte
	// local builds a copy (see submit); nil for a user entry, data, whose
	// copies proposal builds.
	local func(since uint64) *proposal
	data  []byte
	// env is the envelope of data with envSince, which the copies carrying
	// that since share (it is not written once built).
	env      []byte
	envSince uint64
	// first is the record of the first copy of data. cur is the copy
	// proposed last and done its done channel, which the next copy reuses
	// once the loop released cur (nothing is sent on it any more); a copy
	// the loop still holds keeps them, and the next copy gets new ones.
	first proposal
	cur   *proposal
	done  chan error
	fwd   ForwardRequest
	// w hears the apply of any copy of the proposal (by its key).
	w waiter
	// since is the since the copies carry now (see submit).
	since uint64
	// installs is Journal.installs when the submission began.
	installs uint64
	// lastErr is why the last attempt failed; refused is what the last
	// wait heard of a refusal (nil when nothing was heard).
	lastErr, refused error
	// copies counts the proposals made here.
	copies int
	// inLog is set once a copy with the current since was handed to raft
	// (or to the leader) and not refused: it may be in the log, or reach
	// it, and apply however the submission ends. An expiry of the current
	// since clears it: no copy carrying it applies any more.
	inLog bool
	// copyRefused is set by wait when raft refused the copy proposed here.
	copyRefused bool
	// noLeaderDeadline bounds the attempts that do not count against
	// ForwardRetries: waiting for an election or for back-pressure to clear
	// is bounded by 2 × ForwardRetries election timeouts (and by ctx).
	noLeaderDeadline time.Time
}

// outcome is what one attempt of a submission leads to.
type outcome int

const (
	// finished: the attempt's result and error are the answer.
	finished outcome = iota
	// retry: the error is why another attempt is due.
	retry
	// retryFree: as retry, without spending an attempt (an election is
	// under way).
	retryFree
)

// startSubmission fills s for a proposal under key and registers its
// waiter.
func (j *Journal) startSubmission(ctx context.Context, s *submission, key [16]byte, fwd ForwardRequest) {
	s.j, s.ctx, s.key, s.fwd = j, ctx, key, fwd
	j.addWaiter(key, &s.w)
	s.since = j.sinceNow()
	s.installs = j.installs.Load()
	s.noLeaderDeadline = j.cfg.Clock.Now().Add(2 * time.Duration(j.cfg.ForwardRetries) * j.electionTimeout())
}

// proposal builds the quiet copy proposeHere hands to the raft loop now,
// for the current since (forward: see proposal.forward), with its done
// channel.
func (s *submission) proposal(forward bool) *proposal {
	prev := s.cur
	reuse := prev == nil || prev.released.Load()
	switch {
	case !reuse || s.done == nil:
		s.done = s.j.doneChan()
	default:
		select {
		case <-s.done: // prev's refusal, unread: it tells the next copy nothing
		default:
		}
	}
	var p *proposal
	switch {
	case s.local != nil:
		p = s.local(s.since)
	case prev == nil:
		p = &s.first
	case reuse:
		p = prev
	default:
		p = &proposal{}
	}
	if s.local == nil {
		if s.env == nil || s.envSince != s.since {
			s.env, s.envSince = envelope.EncodeUserSince(s.key, s.since, s.data), s.since
		}
		p.data, p.bounded, p.since = s.env, true, s.since
	}
	p.done, p.quiet, p.forward = s.done, true, forward
	p.released.Store(false)
	s.cur = p
	return p
}

// doneChan returns an empty done channel (cap 1) for a proposal, from the
// journal's pool.
func (j *Journal) doneChan() chan error {
	if c, ok := j.doneChans.Get().(chan error); ok {
		return c
	}
	return make(chan error, 1)
}

// settle is the answer of a submission that ends with err before it heard
// its apply. While a copy may still be in raft's log or on its way there
// (inLog), err alone would say the proposal failed when it may yet apply:
// the answer is then ErrOutcomeUnknown (wrapping err), unless the copies
// are known to be dead. With catchUp (the attempts ran out) it first
// waits, bounded by ctx, for this node to apply what it knows is
// committed: a copy committed by then is heard of, and its result is the
// answer.
func (s *submission) settle(err error, catchUp bool) (applyResult, error) {
	j := s.j
	if !s.inLog || errors.Is(err, ErrOutcomeUnknown) {
		return applyResult{}, err
	}
	if catchUp {
		r, ok, werr := s.catchUp()
		if ok || (werr != nil && errors.Is(werr, ErrOutcomeUnknown)) {
			return r, werr
		}
		if werr != nil {
			err = werr
		}
	}
	// Read before the answers: the applier moves the applied index before
	// it answers the entry there.
	applied := j.applied.Load()
	for drained := false; !drained; {
		select {
		case r := <-s.w.c:
			if r, ok, werr := s.heard(r); ok || werr != nil {
				return r, werr
			}
		default:
			drained = true
		}
	}
	if !s.inLog || s.dead(applied) {
		return applyResult{}, err
	}
	return applyResult{}, fmt.Errorf("%w: a copy of the proposal reached raft and may still apply (read the state before proposing it again): %w", ErrOutcomeUnknown, err)
}

// heard takes one answer about the key outside wait: ok means r is the
// apply; an error means the apply is not known here. An expiry of the
// current since (with no image installed meanwhile) clears inLog.
func (s *submission) heard(r applyResult) (applyResult, bool, error) {
	switch {
	case r.err == nil && r.imaged:
		return applyResult{}, false, fmt.Errorf("%w: applied at index %d, inside an image this node installed, with a result not known here", ErrOutcomeUnknown, r.index)
	case r.err == nil:
		return r, true, nil
	case errors.Is(r.err, errExpired) && r.since == s.since && s.j.installs.Load() == s.installs:
		s.inLog = false // no copy carrying since applies any more
	}
	return applyResult{}, false, nil
}

// dead reports whether no copy of a data proposal can apply any more, this
// node having applied through applied without hearing of one: every index
// a copy carrying since can apply at (since plus the cluster's dedupe
// window at most) was
// applied here, and none inside an installed image.
func (s *submission) dead(applied uint64) bool {
	j := s.j
	return s.fwd.Kind == ForwardData && j.installs.Load() == s.installs &&
		applied > s.since+j.dedupeWindow()
}

// catchUp waits until this node applied the commit index it knows now, or
// the proposal's apply is heard, or ctx ends, the journal stops or its
// applier halts. ok means r is the apply; an error is why the wait ended
// early (ErrOutcomeUnknown: the apply was heard, its result is not known
// here).
func (s *submission) catchUp() (r applyResult, ok bool, err error) {
	j := s.j
	target := j.committed.Load()
	for {
		j.mu.Lock()
		ac := j.mu.appliedCh
		j.mu.Unlock()
		if j.applied.Load() >= target || j.failed.Load() != nil {
			return applyResult{}, false, nil
		}
		select {
		case r := <-s.w.c:
			if r, ok, err := s.heard(r); ok || err != nil {
				return r, ok, err
			}
		case <-ac:
		case <-s.ctx.Done():
			return applyResult{}, false, s.j.ctxErr(s.ctx, s.lastErr)
		case <-j.done:
			return applyResult{}, false, ErrClosed
		}
	}
}

// finish stops waiting for the proposal's apply, and returns the done
// channel to the pool once the loop released the last copy.
func (s *submission) finish() {
	s.j.removeWaiter(s.key, &s.w)
	if s.cur != nil && s.cur.released.Load() {
		select {
		case <-s.done:
		default:
		}
		s.j.doneChans.Put(s.done)
		s.done = nil
	}
}

func (s *submission) beforeDeadline() bool { return s.j.cfg.Clock.Now().Before(s.noLeaderDeadline) }

// try makes one attempt, by the leader this node knows of (lc is closed
// when that changes): proposed here when this node leads, left to raft to
// forward in its message stream for a data proposal, forwarded over the
// transport otherwise.
func (s *submission) try(lc <-chan struct{}) (applyResult, outcome, error) {
	j := s.j
	leader := j.leader.Load()
	switch {
	case leader == j.id && j.state.Load() == uint32(raft.StateLeader):
		// Wait for the local apply; a leader change means the entry
		// may be lost: retry (the key makes that safe).
		r, done, perr := s.proposeHere(lc, false, forever)
		if done {
			return r, finished, perr
		}
		return applyResult{}, retry, cmp.Or(perr, ErrNotLeader)
	case leader == 0 || leader == j.id:
		if s.beforeDeadline() {
			return applyResult{}, retryFree, ErrNoLeader
		}
		return applyResult{}, retry, ErrNoLeader
	case s.fwd.Kind == ForwardData:
		// raft forwards it to the leader in its message stream. Nobody
		// answers for it but the local apply of its key: a leader
		// change, or no apply within two election timeouts (the leader
		// may drop a forwarded proposal silently), means another try.
		j.metrics.proposalsForwarded.Add(1)
		r, done, perr := s.proposeHere(lc, true, 2*j.electionTimeout())
		if done {
			return r, finished, perr
		}
		if perr == nil {
			perr = fmt.Errorf("%w: a proposal forwarded to node %d was not applied in time", ErrUnreachable, leader)
		}
		return applyResult{}, retry, perr
	default:
		j.metrics.proposalsForwarded.Add(1)
		_, err := j.tr.Forward(s.ctx, leader, &s.fwd)
		if err == nil || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNotLeader) || s.ctx.Err() != nil {
			// The leader applied it, or the request or its answer was
			// lost, or leadership moved after the leader proposed it.
			s.inLog = true
		}
		if err != nil {
			return applyResult{}, retry, err
		}
		r, ok, werr := s.wait(nil, forever, nil)
		if ok || werr != nil {
			return r, finished, werr
		}
		return applyResult{}, retry, cmp.Or(s.refused, ErrNotLeader)
	}
}

// proposeHere hands a proposal to the local raft loop (forward: raft
// sends it on to the leader) and waits up to d for its apply. done
// means return (r, err); otherwise err is why another attempt is due
// (nil when nothing was heard: the caller names that).
func (s *submission) proposeHere(lc <-chan struct{}, forward bool, d time.Duration) (r applyResult, done bool, err error) {
	j := s.j
	if s.copies++; s.copies > 1 && j.cfg.knobs != nil && j.cfg.knobs.BeforeRepropose != nil {
		j.cfg.knobs.BeforeRepropose(s.key)
	}
	p := s.proposal(forward)
	if err := j.enqueueProposal(s.ctx, p); err != nil {
		p.released.Store(true) // the loop never had it
		return applyResult{}, false, err
	}
	// The loop has the copy: unless raft refuses it (wait hears of that
	// on p.done), it may reach the log.
	before := s.inLog
	s.inLog, s.copyRefused = true, false
	r, ok, werr := s.wait(lc, d, p.done)
	if s.copyRefused && !before {
		s.inLog = false
	}
	if werr != nil || ok {
		return r, true, werr
	}
	return applyResult{}, false, s.refused
}

// wait waits for the apply, or up to d (forever: no timer), or until lc
// (Journal.stirred: a leader change or the raft loop's end) closes;
// refusedc (a quiet proposal's done) only for a proposal made here. ok
// means r is the apply; an error means return it (the journal closed, the
// loop stopped, ctx ended); neither means another attempt is due, with
// s.refused saying what was heard. Without lc, only Close ends the wait
// early.
func (s *submission) wait(lc <-chan struct{}, d time.Duration, refusedc <-chan error) (r applyResult, ok bool, err error) {
	j := s.j
	var timeout <-chan time.Time
	if d < forever {
		tc, stop := j.cfg.Clock.NewTimer(d)
		defer stop()
		timeout = tc
	}
	// Close ends the raft loop, which closes lc: with lc, done is one
	// shared channel more to lock for nothing.
	done := j.done
	if lc != nil {
		done = nil
	}
	s.refused = nil
	for {
		select {
		case err := <-refusedc:
			s.refused, s.copyRefused = err, true
		case r := <-s.w.c:
			if errors.Is(r.err, errExpired) && r.since != s.since {
				continue // a copy made with an older since: long dead
			}
			if r.err != nil {
				// The leader refused the proposal after accepting it
				// (ErrBusy), or its copy expired: the next attempt.
				s.refused = r.err
				return applyResult{}, false, nil
			}
			if r.imaged {
				return applyResult{}, false, fmt.Errorf("%w: applied at index %d, inside an image this node installed, with a result not known here", ErrOutcomeUnknown, r.index)
			}
			return r, true, nil
		case <-lc:
			return applyResult{}, false, j.stopped()
		case <-timeout:
		case <-s.ctx.Done():
			return applyResult{}, false, j.ctxErr(s.ctx, s.lastErr)
		case <-done:
			return applyResult{}, false, ErrClosed
		}
		return applyResult{}, false, nil
	}
}

// stopped is ErrClosed once Close began, the loop's error once the raft
// loop stopped, and nil before.
func (j *Journal) stopped() error {
	select {
	case <-j.done:
		return ErrClosed
	default:
	}
	select {
	case <-j.loopDead:
		return j.loopErr()
	default:
	}
	return nil
}

// awaitRoom waits, after a busy refusal, for the next apply or a tick,
// whichever is first. done means return (r, err): the proposal applied,
// ctx ended or the journal closed.
func (s *submission) awaitRoom() (r applyResult, done bool, err error) {
	j := s.j
	j.mu.Lock()
	ac := j.mu.appliedCh
	j.mu.Unlock()
	tc, stop := j.cfg.Clock.NewTimer(j.cfg.TickInterval)
	defer stop()
	select {
	case r := <-s.w.c:
		if r.err == nil {
			return r, true, nil
		}
	case <-ac:
	case <-tc:
	case <-s.ctx.Done():
		return applyResult{}, true, j.ctxErr(s.ctx, s.lastErr)
	case <-j.done:
		return applyResult{}, true, ErrClosed
	}
	return applyResult{}, false, nil
}

package journal

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/consistency"
	"github.com/metatree/metatree/journal/internal/envelope"
)

// Consistency checks: replicas compare their state machines' digests
// through the log.
//
// Every Config.CheckInterval the leader journals a mark. Each member, as
// it applies the mark at index M, records its state machine's digest at M
// (Digester.StateDigest: the state after every entry before M) and
// proposes a report of it, which a follower forwards to the leader in
// raft's stream. Each member, as it applies the reports, tallies the
// voters' digests for M; once a majority of the voters reported one
// digest, it compares its own with it. A member whose digest differs from
// the majority's raises the corruption alarm (a *CorruptError): its
// applier stops, its raft loop stops (so a leader steps down, as a crashed
// one would), and it serves no reads and no writes until it is replaced.
// The healthy majority goes on. A member that has no digest of its own
// at M (it installed an image past M, or restarted from one) only counts
// the others' reports; the tally and the recorded digests are memory, and
// a restart replays the marks and reports after its image, which gives
// the same answers again.
//
// Since the reports are entries, every member reaches the same verdict on
// a round: each records the voters whose digest differs (the Alarm of
// Status), and once no digest can reach a majority of the voters, each
// refuses writes until an operator journals a clear (ClearAlarm). An image
// a member loads is checked at the first mark after its index, against the
// digests the others reported there: the member's state at that mark is
// the image plus the log after it. Until such a comparison agrees (the
// check at start), the member serves no reads (pendingErr, waitChecked).
//
// Marks and reports are entries of the kind envelope.KindCheck, which format
// version 3 adds: the leader journals them only while the cluster version
// is at least 3, when every member reads them.
//
// (journal/internal/envelope encodes them).
//
// A mark names the format of the digest compared at it: a state machine
// may state its digest in more than one (FormatDigester), and a newer
// format is compared only once every member computes it. A mark of format
// 1 is the plain mark. Format version 5 adds the mark of a format, and the
// leader names digest format 2 from cluster version 5 on (markFormat).
// The format is in the entry, so every replica computes the same one at a
// mark, whatever its binary or the cluster version it knows at apply.

const (
	// checkVersion is the format version that reads envelope.KindCheck entries.
	checkVersion = 3
	// digestV2Version is the format version that reads marks of a format
	// (checkMarkOf) and computes digest format 2.
	digestV2Version = 5
	// checkReportLag: a member reports its digest at a mark only when it
	// applies the mark within this many entries of the commit index it
	// knows, so that a replay of an old log proposes no reports of old
	// marks.
	checkReportLag = 1024
)

// Digester is implemented by a StateMachine that can state a digest of its
// content (catalog.Tree does): equal on replicas that applied the same
// entries, different (with overwhelming probability) otherwise. The
// journal then runs consistency checks (Config.CheckInterval). StateDigest
// is called on the applier's goroutine between two Apply calls and must
// cover everything applied so far; at most envelope.MaxDigestLen (64) bytes.
type Digester interface {
	StateDigest() []byte
}

// FormatDigester is a Digester that states its digest in more than one
// format (catalog.Tree does): at a check mark the journal compares
// StateDigestOf(format), the format the mark names (see markFormat).
// Format 1 is StateDigest's. StateDigestOf runs where StateDigest does and
// returns nil for a format it does not compute (the mark is then skipped
// here). A Digester that is no FormatDigester states one digest, compared
// at every mark whatever its format.
type FormatDigester interface {
	Digester
	StateDigestOf(format int) []byte
}

// markFormat is the digest format the leader names in the marks it
// journals at cluster version cv: 2 once every member computes it.
func markFormat(cv uint32) byte {
	if cv >= digestV2Version {
		return 2
	}
	return 1
}

// Alarm is the consistency alarm as the applied log tells it: the same on
// every member that applied as far (the reports are entries). At the mark
// at Index, the voters in Members reported a digest other than the one a
// majority of the voters reported (Majority, in the digest format the
// mark named: Format, 0 when this member did not apply the mark); or, with
// NoMajority, no digest had a majority of the voters, Members lists every
// voter that reported, and every member refuses writes (ErrCorrupt) until
// the alarm is cleared (Journal.ClearAlarm). A later disagreement adds its
// members and moves Index to its mark.
type Alarm = consistency.Alarm

// CorruptError is the corruption alarm: at log index Index this member's
// state machine digest (Local) differs from the one a majority of the
// voters (Agreeing, in increasing order; it may name this member: a report
// its previous run journaled before a restart from an image that differs)
// reported, both in the digest format the mark named (Format).
// errors.Is(err, ErrCorrupt) holds.
type CorruptError = consistency.CorruptError

// applyCheck handles a envelope.KindCheck entry at idx on the applier; it returns
// the corruption alarm when this member's digest differs from the
// majority's.
func (j *Journal) applyCheck(idx uint64, c envelope.Check) *CorruptError {
	d, ok := j.cfg.StateMachine.(Digester)
	if !ok {
		return nil
	}
	ck := &j.checker
	switch c.Op {
	case envelope.CheckMark:
		own := slices.Clone(consistency.StateDigest(d, c.Format))
		if len(own) == 0 || len(own) > envelope.MaxDigestLen {
			j.log.Error("state machine digest of unusable length; consistency checks skipped", "index", idx, "format", c.Format, "bytes", len(own))
			return nil
		}
		ck.RecordMark(idx, c.Format, own)
		if idx+checkReportLag >= j.committed.Load() {
			rep := envelope.EncodeCheckReport(idx, j.id, own)
			j.checkReport.Store(&rep)
			select {
			case j.checkc <- struct{}{}:
			default:
			}
		}
	case envelope.CheckReport:
		j.mu.Lock()
		voters := slices.Clone(j.mu.membership.Voters)
		j.mu.Unlock()
		ce, raised := ck.Tally(voters, c)
		if raised != nil {
			j.log.Error("consistency alarm: voters disagree on the state digest",
				"index", raised.Index, "members", raised.Members, "no_majority", raised.NoMajority, "format", raised.Format, "majority", hex.EncodeToString(raised.Majority))
		}
		return ce
	case envelope.CheckClear:
		if was := ck.Clear(); was != nil {
			j.log.Warn("consistency alarm cleared", "index", idx, "was", *was)
		}
	}
	return nil
}

// settle ends the check at start, on the applier, when this cluster
// cannot compare: the state machine states no digest, the checks are off,
// the cluster writes no format with check entries yet, or this member is
// the sole voter (there is no one to compare with). It never starts
// again once ended, so a cluster version that rises later leaves the
// members that serve serving.
func (j *Journal) settlePending() {
	ck := &j.checker
	if !ck.Pending() {
		return
	}
	_, digester := j.cfg.StateMachine.(Digester)
	j.mu.Lock()
	m := j.mu.membership
	sole := len(m.Voters) == 1 && m.Voters[0] == j.id
	version := m.ClusterVersion()
	j.mu.Unlock()
	if !digester || j.cfg.CheckInterval <= 0 || version < checkVersion || sole {
		ck.EndPending()
	}
}

// pendingErr is the error reads get while the check at start has not
// confirmed this member's state, nil otherwise.
func (j *Journal) pendingErr() error {
	if !j.checker.Pending() {
		return nil
	}
	return fmt.Errorf("%w: the consistency check at start has not yet compared this member's loaded state with the other voters' (at the next check mark, within Config.CheckInterval)", ErrStale)
}

// corruptErr is the raised corruption alarm, or nil.
func (j *Journal) corruptErr() *CorruptError { return j.corrupt.Load() }

// raiseCorrupt raises the alarm: the applier stops (its caller returns the
// error to applyLoop, which records it as the journal's failure) and the
// raft loop stops at its next turn.
func (j *Journal) raiseCorrupt(e *CorruptError) {
	if j.corrupt.CompareAndSwap(nil, e) {
		j.log.Error("consistency check failed: this member's state differs from the majority's",
			"index", e.Index, "format", e.Format, "local", hex.EncodeToString(e.Local), "majority", hex.EncodeToString(e.Majority), "voters", e.Agreeing)
	}
	select {
	case j.checkc <- struct{}{}: // wake the loop
	default:
	}
}

// maybeCheck is the leader's part, on the raft loop: journal a mark every
// CheckInterval, once the cluster reads marks and the state machine is a
// Digester, naming the digest format of the cluster version (markFormat). A new leader waits a full interval first, so that a change of
// leader adds no round. A dropped proposal is retried at the next turn.
// It runs every turn of the loop, so the clock comes first and the
// membership's lock only once an interval has passed.
func (j *Journal) maybeCheck(last *time.Time) {
	if j.cfg.CheckInterval <= 0 || j.state.Load() != uint32(raft.StateLeader) {
		*last = time.Time{}
		return
	}
	now := j.cfg.Clock.Now()
	if last.IsZero() {
		*last = now
		return
	}
	if now.Sub(*last) < j.cfg.CheckInterval {
		return
	}
	cv := j.clusterVersion()
	if _, ok := j.cfg.StateMachine.(Digester); !ok || cv < checkVersion {
		*last = now
		return
	}
	if j.loop.rn.Propose(envelope.EncodeCheckMark(markFormat(cv))) == nil {
		*last = now
	}
}

// proposeReport proposes the report the applier left, on the raft loop.
func (j *Journal) proposeReport() {
	if rep := j.checkReport.Swap(nil); rep != nil {
		_ = j.loop.rn.Propose(*rep) // dropped (no leader): this mark goes unreported here
	}
}

// sendLastReport runs on the loop as it stops on this member's corruption
// alarm: it proposes the report the applier left, if the loop has not
// yet, and sends what raft has for the peers. The applier can find this
// member differs (the other voters' reports of a mark applied) before the
// loop took the report of that mark; sent now, it still reaches the log,
// and the healthy voters name this member in their alarm. With
// asynchronous storage writes raft puts every message that must wait for a
// local write inside that write's request, so a Ready's messages for peers
// may go out without the rest of it.
func (j *Journal) sendLastReport() {
	j.proposeReport()
	if !j.loop.rn.HasReady() {
		return
	}
	rd := j.loop.rn.Ready()
	var out []*raftpb.Message
	for _, m := range rd.Messages {
		if to := m.GetTo(); to != raft.LocalAppendThread && to != raft.LocalApplyThread {
			out = append(out, m)
		}
	}
	j.send(out)
}

// waitChecked waits until the check at start confirmed this member's
// state (at once when it is not pending), for ReadBarrier.
func (j *Journal) waitChecked(ctx context.Context) error {
	for {
		j.mu.Lock()
		ch := j.mu.appliedCh
		j.mu.Unlock()
		if c := j.corruptErr(); c != nil {
			return operr.Errorf("journal: read barrier: %w", c)
		}
		if !j.checker.Pending() {
			return nil
		}
		if e := j.failed.Load(); e != nil {
			return *e
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return operr.Errorf("journal: read barrier: %w: %w", j.pendingErr(), context.Cause(ctx))
		case <-j.done:
			return ErrClosed
		}
	}
}

// ClearAlarm clears the cluster's consistency alarm (Status.Alarm) on
// every member: it journals a clear entry and returns once one applied on
// this member (at once when this member knows of no alarm). Clear it once
// the members the alarm names were replaced (they restore from a healthy
// member's image): while no digest had a majority, writes stay refused
// until then. A member whose own state differs (a *CorruptError) applies
// nothing and cannot clear.
func (j *Journal) ClearAlarm(ctx context.Context) error {
	if c := j.corruptErr(); c != nil {
		return operr.Errorf("journal: clear alarm: %w", c)
	}
	if err := j.writable(); err != nil {
		return operr.Errorf("journal: clear alarm: %w", err)
	}
	// A proposal raft drops (no leader yet) is made again every two
	// election timeouts.
	retry, stop := j.cfg.Clock.NewTicker(2 * j.electionTimeout())
	defer stop()
	for propose := true; ; {
		j.mu.Lock()
		ch := j.mu.appliedCh
		j.mu.Unlock()
		if j.checker.Current() == nil {
			return nil
		}
		if e := j.failed.Load(); e != nil {
			return operr.Errorf("journal: clear alarm: %w", *e)
		}
		if propose {
			propose = false
			if err := j.do(ctx, func() { _ = j.loop.rn.Propose(envelope.EncodeCheckClear()) }); err != nil {
				return operr.Errorf("journal: clear alarm: %w", err)
			}
		}
		select {
		case <-ch:
		case <-retry:
			propose = true
		case <-ctx.Done():
			return operr.Errorf("journal: clear alarm: %w", j.ctxErr(ctx, nil))
		case <-j.done:
			return ErrClosed
		}
	}
}

package journal

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
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
	// checkKeep is how many recent marks a member keeps its digest of.
	checkKeep = 8
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

// stateDigest returns d's digest in format.
func stateDigest(d Digester, format byte) []byte {
	if fd, ok := d.(FormatDigester); ok {
		return fd.StateDigestOf(int(format))
	}
	return d.StateDigest()
}

// CorruptError is the corruption alarm: at log index Index this member's
// state machine digest (Local) differs from the one a majority of the
// voters (Agreeing) reported, both in the digest format the mark named
// (Format). errors.Is(err, ErrCorrupt) holds.
type CorruptError struct {
	Index    uint64
	Format   int
	Local    []byte
	Majority []byte
	// Agreeing are the voters that reported Majority, in increasing
	// order. It may name this member: a report its previous run journaled
	// before a restart from an image that differs.
	Agreeing []uint64
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: corrupt: at index %d this member's state digest (format %d) is %s, and voters %v report %s; this member stopped applying and serving: replace it (it restores from a healthy member's image)",
		e.Index, e.Format, hex.EncodeToString(e.Local), e.Agreeing, hex.EncodeToString(e.Majority))
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// checker is the applier's record of the recent marks and the reports on
// them, the alarm the log tells of, and the check at start. Only the
// applier changes it; mu guards it for Status, metrics and the writers.
type checker struct {
	mu     sync.Mutex
	marks  []checkMarkRec // oldest first, at most checkKeep
	checks uint64         // comparisons made (metatree_journal_consistency_checks_total)
	// alarm is the cluster's consistency alarm as the applied log tells
	// it (nil: none); noMajority mirrors alarm.NoMajority for writers.
	alarm      *Alarm
	noMajority atomic.Bool
	// pending: this member's state was loaded (an image, or a log replayed
	// at start) and no comparison at a mark after pendingAfter has
	// confirmed it yet (the check at start; see settle).
	pending      atomic.Bool
	pendingAfter uint64
}

type checkMarkRec struct {
	index    uint64
	format   byte              // the digest format the mark names (0: its mark not applied here)
	digest   []byte            // this member's digest at the mark (nil: none, it loaded a later image)
	votes    map[uint64][]byte // voter id -> reported digest
	done     bool              // a majority of the voters agreed, or none can
	majority []byte            // the digest a majority reported (nil: no majority)
}

// Alarm is the consistency alarm as the applied log tells it: the same on
// every member that applied as far (the reports are entries). At the mark
// at Index, the voters in Members reported a digest other than the one a
// majority of the voters reported (Majority, in the digest format the
// mark named: Format, 0 when this member did not apply the mark); or, with NoMajority, no
// digest had a majority of the voters, Members lists every voter that
// reported, and every member refuses writes (ErrCorrupt) until the alarm
// is cleared (Journal.ClearAlarm). A later disagreement adds its members
// and moves Index to its mark.
type Alarm struct {
	Index      uint64
	Format     int
	Members    []uint64
	Majority   []byte
	NoMajority bool
}

// recordMark records this member's digest own (nil: none) in format at
// the mark at idx.
func (ck *checker) recordMark(idx uint64, format byte, own []byte) *checkMarkRec {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	m := ck.markLocked(idx, own)
	if m != nil {
		m.format = format
	}
	return m
}

func (ck *checker) markLocked(idx uint64, own []byte) *checkMarkRec {
	if i := slices.IndexFunc(ck.marks, func(m checkMarkRec) bool { return m.index == idx }); i >= 0 {
		return &ck.marks[i]
	}
	i, _ := slices.BinarySearchFunc(ck.marks, idx, func(m checkMarkRec, idx uint64) int { return cmp.Compare(m.index, idx) })
	if len(ck.marks) >= checkKeep && i == 0 {
		return nil // older than every mark kept
	}
	ck.marks = slices.Insert(ck.marks, i, checkMarkRec{index: idx, digest: own, votes: map[uint64][]byte{}})
	if len(ck.marks) > checkKeep {
		ck.marks = slices.Delete(ck.marks, 0, len(ck.marks)-checkKeep)
		i -= 1
	}
	return &ck.marks[i]
}

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
		own := slices.Clone(stateDigest(d, c.Format))
		if len(own) == 0 || len(own) > envelope.MaxDigestLen {
			j.log.Error("state machine digest of unusable length; consistency checks skipped", "index", idx, "format", c.Format, "bytes", len(own))
			return nil
		}
		ck.recordMark(idx, c.Format, own)
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
		ce, raised := ck.tally(voters, c)
		if raised != nil {
			j.log.Error("consistency alarm: voters disagree on the state digest",
				"index", raised.Index, "members", raised.Members, "no_majority", raised.NoMajority, "format", raised.Format, "majority", hex.EncodeToString(raised.Majority))
		}
		return ce
	case envelope.CheckClear:
		ck.mu.Lock()
		if ck.alarm != nil {
			j.log.Warn("consistency alarm cleared", "index", idx, "was", *ck.alarm)
		}
		ck.alarm = nil
		ck.noMajority.Store(false)
		ck.mu.Unlock()
	}
	return nil
}

// tally records a report and, once a majority of the voters agree on a
// digest, compares this member's with it (ce: this member differs) and
// raises the alarm naming the voters that differ; once no digest can have
// a majority any more, it raises the alarm that stops writes. raised is
// the alarm when this report changed it.
func (ck *checker) tally(voters []uint64, c envelope.Check) (ce *CorruptError, raised *Alarm) {
	if !slices.Contains(voters, c.From) {
		return nil, nil
	}
	ck.mu.Lock()
	defer ck.mu.Unlock()
	m := ck.markLocked(c.Mark, nil)
	if m == nil {
		return nil, nil // a mark older than every one kept
	}
	if _, seen := m.votes[c.From]; seen {
		return nil, nil
	}
	m.votes[c.From] = slices.Clone(c.Digest)
	if m.done {
		// A late report: it counts against the decided majority.
		if m.majority != nil && !bytes.Equal(m.majority, c.Digest) {
			return nil, ck.raiseLocked(Alarm{Index: m.index, Format: int(m.format), Members: []uint64{c.From}, Majority: m.majority})
		}
		return nil, nil
	}
	need := len(voters)/2 + 1
	counts := map[string]int{}
	best, bestN, missing := "", 0, 0
	for _, id := range voters {
		v, ok := m.votes[id]
		if !ok {
			missing++
			continue
		}
		counts[string(v)]++
		if n := counts[string(v)]; n > bestN {
			best, bestN = string(v), n
		}
	}
	switch {
	case bestN >= need:
		m.done = true
		m.majority = []byte(best)
		var differ []uint64
		for _, id := range voters {
			if v, ok := m.votes[id]; ok && string(v) != best {
				differ = append(differ, id)
			}
		}
		if len(differ) > 0 {
			raised = ck.raiseLocked(Alarm{Index: m.index, Format: int(m.format), Members: differ, Majority: m.majority})
		}
		if m.digest == nil {
			return nil, raised // this member has no digest of its own here
		}
		ck.checks++
		if !bytes.Equal(m.digest, m.majority) {
			var agreeing []uint64
			for _, id := range voters {
				if v, ok := m.votes[id]; ok && string(v) == best {
					agreeing = append(agreeing, id)
				}
			}
			slices.Sort(agreeing)
			return &CorruptError{Index: m.index, Format: int(m.format), Local: m.digest, Majority: slices.Clone(m.majority), Agreeing: agreeing}, raised
		}
		if m.index > ck.pendingAfter {
			ck.pending.Store(false) // the check at start passed
		}
		return nil, raised
	case bestN+missing < need:
		// No digest can reach a majority any more: no member is known
		// to be right, so none is singled out, and writes stop.
		m.done = true
		var reported []uint64
		for _, id := range voters {
			if _, ok := m.votes[id]; ok {
				reported = append(reported, id)
			}
		}
		return nil, ck.raiseLocked(Alarm{Index: m.index, Format: int(m.format), Members: reported, NoMajority: true})
	}
	return nil, nil
}

// raiseLocked merges a into the alarm and returns the result.
func (ck *checker) raiseLocked(a Alarm) *Alarm {
	if ck.alarm == nil {
		ck.alarm = &Alarm{}
	}
	cur := ck.alarm
	if a.Index >= cur.Index {
		cur.Format = a.Format // the format of the newest mark's digests
	}
	cur.Index = max(cur.Index, a.Index)
	for _, id := range a.Members {
		if !slices.Contains(cur.Members, id) {
			cur.Members = append(cur.Members, id)
		}
	}
	slices.Sort(cur.Members)
	if a.Majority != nil {
		cur.Majority = slices.Clone(a.Majority)
	}
	cur.NoMajority = cur.NoMajority || a.NoMajority
	ck.noMajority.Store(cur.NoMajority)
	out := *cur
	out.Members = slices.Clone(cur.Members)
	return &out
}

// current returns a copy of the alarm, or nil.
func (ck *checker) current() *Alarm {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if ck.alarm == nil {
		return nil
	}
	out := *ck.alarm
	out.Members = slices.Clone(out.Members)
	out.Majority = slices.Clone(out.Majority)
	return &out
}

// writeRefusal is the error writes get while no digest has a majority of
// the voters (the alarm's NoMajority), nil otherwise.
func (ck *checker) writeRefusal() error {
	if !ck.noMajority.Load() {
		return nil
	}
	a := ck.current()
	if a == nil || !a.NoMajority {
		return nil
	}
	return fmt.Errorf("%w: at index %d the voters %v reported state digests of which none has a majority; writes stop cluster-wide until the members that differ are replaced and the alarm is cleared",
		ErrCorrupt, a.Index, a.Members)
}

// startPending starts the check at start: this member's state was loaded
// (an image at index after, or a replayed log) and is confirmed only by a
// comparison at a later mark.
func (ck *checker) startPending(after uint64) {
	ck.mu.Lock()
	ck.pendingAfter = after
	ck.mu.Unlock()
	ck.pending.Store(true)
}

// settle ends the check at start, on the applier, when this cluster
// cannot compare: the state machine states no digest, the checks are off,
// the cluster writes no format with check entries yet, or this member is
// the sole voter (there is no one to compare with). It never starts
// again once ended, so a cluster version that rises later leaves the
// members that serve serving.
func (j *Journal) settlePending() {
	ck := &j.checker
	if !ck.pending.Load() {
		return
	}
	_, digester := j.cfg.StateMachine.(Digester)
	j.mu.Lock()
	m := j.mu.membership
	sole := len(m.Voters) == 1 && m.Voters[0] == j.id
	version := m.clusterVersion()
	j.mu.Unlock()
	if !digester || j.cfg.CheckInterval <= 0 || version < checkVersion || sole {
		ck.pending.Store(false)
	}
}

// pendingErr is the error reads get while the check at start has not
// confirmed this member's state, nil otherwise.
func (j *Journal) pendingErr() error {
	if !j.checker.pending.Load() {
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
	if j.rn.Propose(envelope.EncodeCheckMark(markFormat(cv))) == nil {
		*last = now
	}
}

// proposeReport proposes the report the applier left, on the raft loop.
func (j *Journal) proposeReport() {
	if rep := j.checkReport.Swap(nil); rep != nil {
		_ = j.rn.Propose(*rep) // dropped (no leader): this mark goes unreported here
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
	if !j.rn.HasReady() {
		return
	}
	rd := j.rn.Ready()
	var out []*raftpb.Message
	for _, m := range rd.Messages {
		if to := m.GetTo(); to != raft.LocalAppendThread && to != raft.LocalApplyThread {
			out = append(out, m)
		}
	}
	j.send(out)
}

// count is how many comparisons the member made.
func (ck *checker) count() uint64 {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return ck.checks
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
		if !j.checker.pending.Load() {
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
		if j.checker.current() == nil {
			return nil
		}
		if e := j.failed.Load(); e != nil {
			return operr.Errorf("journal: clear alarm: %w", *e)
		}
		if propose {
			propose = false
			if err := j.do(ctx, func() { _ = j.rn.Propose(envelope.EncodeCheckClear()) }); err != nil {
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

package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
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
// Marks and reports are entries of the kind kindCheck, which format
// version 3 adds: the leader journals them only while the cluster version
// is at least 3, when every member reads them.
//
//	kindCheck mark:   [5][1]
//	kindCheck report: [5][2][8-byte big-endian mark index][8-byte big-endian member id][digest...]

const (
	kindCheck byte = 5

	checkMark   byte = 1
	checkReport byte = 2

	// checkVersion is the format version that reads kindCheck entries.
	checkVersion = 3
	// maxDigestLen bounds a report's digest.
	maxDigestLen = 64
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
// cover everything applied so far; at most maxDigestLen (64) bytes.
type Digester interface {
	StateDigest() []byte
}

// CorruptError is the corruption alarm: at log index Index this member's
// state machine digest (Local) differs from the one a majority of the
// voters (Agreeing) reported. errors.Is(err, ErrCorrupt) holds.
type CorruptError struct {
	Index    uint64
	Local    []byte
	Majority []byte
	Agreeing []uint64 // the voters that reported Majority, in increasing order
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: corrupt: at index %d this member's state digest is %s, and voters %v report %s; this member stopped applying and serving: replace it (it restores from a healthy member's image)",
		e.Index, hex.EncodeToString(e.Local), e.Agreeing, hex.EncodeToString(e.Majority))
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// checkEntry is a decoded kindCheck entry.
type checkEntry struct {
	op     byte
	mark   uint64 // report: the mark's index
	from   uint64 // report: the reporting member
	digest []byte // report: its digest at mark (aliases the entry)
}

func encodeCheckMark() []byte { return []byte{kindCheck, checkMark} }

func encodeCheckReport(mark, from uint64, digest []byte) []byte {
	b := make([]byte, 0, 2+16+len(digest))
	b = append(b, kindCheck, checkReport)
	b = binary.BigEndian.AppendUint64(b, mark)
	b = binary.BigEndian.AppendUint64(b, from)
	return append(b, digest...)
}

// decodeCheck decodes a kindCheck entry. An operation this code does not
// know is ErrUnknownVersion (a newer format: never skipped).
func decodeCheck(b []byte) (checkEntry, error) {
	if len(b) < 2 || b[0] != kindCheck {
		return checkEntry{}, fmt.Errorf("%w: check entry of %d bytes", ErrMalformed, len(b))
	}
	switch b[1] {
	case checkMark:
		if len(b) != 2 {
			return checkEntry{}, fmt.Errorf("%w: check mark of %d bytes", ErrMalformed, len(b))
		}
		return checkEntry{op: checkMark}, nil
	case checkReport:
		n := len(b) - 18
		if n < 1 || n > maxDigestLen {
			return checkEntry{}, fmt.Errorf("%w: check report of %d bytes (a digest of 1 to %d bytes)", ErrMalformed, len(b), maxDigestLen)
		}
		c := checkEntry{op: checkReport, mark: binary.BigEndian.Uint64(b[2:]), from: binary.BigEndian.Uint64(b[10:]), digest: b[18:]}
		if c.mark == 0 || c.from == 0 {
			return checkEntry{}, fmt.Errorf("%w: check report of mark %d from member %d", ErrMalformed, c.mark, c.from)
		}
		return c, nil
	}
	return checkEntry{}, fmt.Errorf("%w: check entry operation %d", ErrUnknownVersion, b[1])
}

// checker is the applier's record of the recent marks and the reports on
// them. Only the applier changes it; mu guards it for Status and metrics.
type checker struct {
	mu     sync.Mutex
	marks  []checkMarkRec // oldest first, at most checkKeep
	checks uint64         // comparisons made (metatree_journal_consistency_checks_total)
}

type checkMarkRec struct {
	index  uint64
	digest []byte
	votes  map[uint64][]byte // voter id -> reported digest
	done   bool              // compared with a majority's digest
}

// applyCheck handles a kindCheck entry at idx on the applier; it returns
// the corruption alarm when this member's digest differs from the
// majority's.
func (j *Journal) applyCheck(idx uint64, c checkEntry) *CorruptError {
	d, ok := j.cfg.StateMachine.(Digester)
	if !ok {
		return nil
	}
	ck := &j.checker
	switch c.op {
	case checkMark:
		own := slices.Clone(d.StateDigest())
		if len(own) == 0 || len(own) > maxDigestLen {
			j.log.Error("state machine digest of unusable length; consistency checks skipped", "index", idx, "bytes", len(own))
			return nil
		}
		ck.mu.Lock()
		ck.marks = append(ck.marks, checkMarkRec{index: idx, digest: own, votes: map[uint64][]byte{}})
		if len(ck.marks) > checkKeep {
			ck.marks = slices.Delete(ck.marks, 0, len(ck.marks)-checkKeep)
		}
		ck.mu.Unlock()
		if idx+checkReportLag >= j.committed.Load() {
			rep := encodeCheckReport(idx, j.id, own)
			j.checkReport.Store(&rep)
			select {
			case j.checkc <- struct{}{}:
			default:
			}
		}
	case checkReport:
		return j.tally(c)
	}
	return nil
}

// tally records a report and, once a majority of the voters agree on a
// digest, compares this member's with it.
func (j *Journal) tally(c checkEntry) *CorruptError {
	j.mu.Lock()
	voters := slices.Clone(j.mu.membership.Voters)
	j.mu.Unlock()
	if !slices.Contains(voters, c.from) {
		return nil
	}
	ck := &j.checker
	ck.mu.Lock()
	defer ck.mu.Unlock()
	i := slices.IndexFunc(ck.marks, func(m checkMarkRec) bool { return m.index == c.mark })
	if i < 0 {
		return nil // a mark before this member's image, or long gone
	}
	m := &ck.marks[i]
	if _, seen := m.votes[c.from]; seen || m.done {
		return nil
	}
	m.votes[c.from] = slices.Clone(c.digest)
	var agreeing []uint64
	for id, v := range m.votes {
		if bytes.Equal(v, c.digest) && slices.Contains(voters, id) {
			agreeing = append(agreeing, id)
		}
	}
	if len(agreeing) < len(voters)/2+1 {
		return nil
	}
	m.done = true
	ck.checks++
	if bytes.Equal(m.digest, c.digest) {
		return nil
	}
	slices.Sort(agreeing)
	return &CorruptError{Index: m.index, Local: m.digest, Majority: slices.Clone(c.digest), Agreeing: agreeing}
}

// corruptErr is the raised corruption alarm, or nil.
func (j *Journal) corruptErr() *CorruptError { return j.corrupt.Load() }

// raiseCorrupt raises the alarm: the applier stops (its caller returns the
// error to applyLoop, which records it as the journal's failure) and the
// raft loop stops at its next turn.
func (j *Journal) raiseCorrupt(e *CorruptError) {
	if j.corrupt.CompareAndSwap(nil, e) {
		j.log.Error("consistency check failed: this member's state differs from the majority's",
			"index", e.Index, "local", hex.EncodeToString(e.Local), "majority", hex.EncodeToString(e.Majority), "voters", e.Agreeing)
	}
	select {
	case j.checkc <- struct{}{}: // wake the loop
	default:
	}
}

// maybeCheck is the leader's part, on the raft loop: journal a mark every
// CheckInterval, once the cluster reads marks and the state machine is a
// Digester. A new leader waits a full interval first, so that a change of
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
	if _, ok := j.cfg.StateMachine.(Digester); !ok || j.clusterVersion() < checkVersion {
		*last = now
		return
	}
	if j.rn.Propose(encodeCheckMark()) == nil {
		*last = now
	}
}

// proposeReport proposes the report the applier left, on the raft loop.
func (j *Journal) proposeReport() {
	if rep := j.checkReport.Swap(nil); rep != nil {
		_ = j.rn.Propose(*rep) // dropped (no leader): this mark goes unreported here
	}
}

// count is how many comparisons the member made.
func (ck *checker) count() uint64 {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return ck.checks
}

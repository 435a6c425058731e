package consistency

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/errs"
)

// Keep is how many recent marks a Checker keeps its digest of.
const Keep = 8

// StateDigest returns d's digest in format: StateDigestOf(format) when d
// states its digest in more than one format (journal.FormatDigester),
// StateDigest otherwise.
func StateDigest(d interface{ StateDigest() []byte }, format byte) []byte {
	if fd, ok := d.(interface{ StateDigestOf(format int) []byte }); ok {
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

func (e *CorruptError) Unwrap() error { return errs.ErrCorrupt }

// Checker is the record of the recent marks and the reports on them, the
// alarm the log tells of, and the check at start. Only its
// owner (the journal's applier, or an offline replay) changes it; mu
// guards it for the readers (Status, metrics and the writers). The zero
// Checker is ready for use.
type Checker struct {
	mu     sync.Mutex
	marks  []checkMarkRec // oldest first, at most Keep
	checks uint64         // comparisons made (metatree_journal_consistency_checks_total)
	// alarm is the cluster's consistency alarm as the applied log tells
	// it (nil: none); noMajority mirrors alarm.NoMajority for writers.
	alarm      *Alarm
	noMajority atomic.Bool
	// pending: this member's state was loaded (an image, or a log replayed
	// at start) and no comparison at a mark after pendingAfter has
	// confirmed it yet (the check at start; see EndPending).
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
// mark named: Format, 0 when this member did not apply the mark); or, with
// NoMajority, no digest had a majority of the voters, Members lists every
// voter that reported, and every member refuses writes (ErrCorrupt) until
// the alarm is cleared (journal's Journal.ClearAlarm). A later
// disagreement adds its members and moves Index to its mark.
type Alarm struct {
	Index      uint64
	Format     int
	Members    []uint64
	Majority   []byte
	NoMajority bool
}

// RecordMark records this member's digest own (nil: none) in format at
// the mark at idx.
func (ck *Checker) RecordMark(idx uint64, format byte, own []byte) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if m := ck.markLocked(idx, own); m != nil {
		m.format = format
	}
}

func (ck *Checker) markLocked(idx uint64, own []byte) *checkMarkRec {
	if i := slices.IndexFunc(ck.marks, func(m checkMarkRec) bool { return m.index == idx }); i >= 0 {
		return &ck.marks[i]
	}
	i, _ := slices.BinarySearchFunc(ck.marks, idx, func(m checkMarkRec, idx uint64) int { return cmp.Compare(m.index, idx) })
	if len(ck.marks) >= Keep && i == 0 {
		return nil // older than every mark kept
	}
	ck.marks = slices.Insert(ck.marks, i, checkMarkRec{index: idx, digest: own, votes: map[uint64][]byte{}})
	if len(ck.marks) > Keep {
		ck.marks = slices.Delete(ck.marks, 0, len(ck.marks)-Keep)
		i -= 1
	}
	return &ck.marks[i]
}

// Tally records a report and, once a majority of the voters agree on a
// digest, compares this member's with it (ce: this member differs) and
// raises the alarm naming the voters that differ; once no digest can have
// a majority any more, it raises the alarm that stops writes. raised is
// the alarm when this report changed it.
func (ck *Checker) Tally(voters []uint64, c envelope.Check) (ce *CorruptError, raised *Alarm) {
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
func (ck *Checker) raiseLocked(a Alarm) *Alarm {
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

// Current returns a copy of the alarm, or nil.
func (ck *Checker) Current() *Alarm {
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

// WriteRefusal is the error writes get while no digest has a majority of
// the voters (the alarm's NoMajority), nil otherwise.
func (ck *Checker) WriteRefusal() error {
	if !ck.noMajority.Load() {
		return nil
	}
	a := ck.Current()
	if a == nil || !a.NoMajority {
		return nil
	}
	return fmt.Errorf("%w: at index %d the voters %v reported state digests of which none has a majority; writes stop cluster-wide until the members that differ are replaced and the alarm is cleared",
		errs.ErrCorrupt, a.Index, a.Members)
}

// StartPending starts the check at start: this member's state was loaded
// (an image at index after, or a replayed log) and is confirmed only by a
// comparison at a later mark.
func (ck *Checker) StartPending(after uint64) {
	ck.mu.Lock()
	ck.pendingAfter = after
	ck.mu.Unlock()
	ck.pending.Store(true)
}

// Count is how many comparisons the member made.
func (ck *Checker) Count() uint64 {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return ck.checks
}

// Pending reports whether the check at start has not yet confirmed this
// member's state (StartPending, and no comparison since).
func (ck *Checker) Pending() bool { return ck.pending.Load() }

// EndPending ends the check at start without a comparison, when the
// cluster cannot compare.
func (ck *Checker) EndPending() { ck.pending.Store(false) }

// Clear ends the alarm (a clear entry applied) and returns the one it
// ended, or nil.
func (ck *Checker) Clear() *Alarm {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	was := ck.alarm
	ck.alarm = nil
	ck.noMajority.Store(false)
	return was
}

package fakejournal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCompacted: ReadEntries asked for entries that ImageWritten or
// InstallSnapshot compacted away.
var ErrCompacted = errors.New("fake journal: compacted")

// StateMachine is what a replica applies committed entries to: a
// *catalog.Tree or an image.State.
type StateMachine interface {
	Apply(index uint64, data []byte) any
}

// Image is one ImageWritten call's arguments.
type Image struct {
	Index, Term uint64
	Membership  []byte
}

type lease struct {
	term   uint64
	leader bool
}

// Log is an in-memory journal. Create it with New.
type Log struct {
	mu       sync.Mutex
	latency  time.Duration
	entries  map[uint64][]byte
	first    uint64 // first retained index
	last     uint64
	margin   uint64
	replicas map[uint64]StateMachine
	leases   map[uint64]lease // what each replica believes: term, leader
	images   []uint64
	recorded []Image

	imageWrittenErr error
	readBlock       chan struct{} // when set, ReadEntries waits for it or ctx
	readStarted     chan struct{} // when set, ReadEntries sends on it before waiting

	reads, inFlight, maxInFlight atomic.Int32
}

// New returns an empty Log: its first entry commits at index 1.
func New() *Log {
	return &Log{entries: map[uint64][]byte{}, first: 1, margin: 10, replicas: map[uint64]StateMachine{}, leases: map[uint64]lease{}}
}

// Attach makes sm replica id's state machine: every entry committed from
// now on is applied to it. A replica attached again under the same id
// replaces the one before.
func (l *Log) Attach(id uint64, sm StateMachine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replicas[id] = sm
}

// SetLease sets the raft term replica id believes, and whether it
// believes itself the leader in it.
func (l *Log) SetLease(id, term uint64, leader bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases[id] = lease{term: term, leader: leader}
}

// SetLeader makes every replica with a lease believe that leader leads in
// term.
func (l *Log) SetLeader(term, leader uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.leases {
		l.leases[id] = lease{term: term, leader: id == leader}
	}
}

// SlowCommits makes every proposal from now on take d before it commits.
func (l *Log) SlowCommits(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.latency = d
}

// Commit appends data at the next index, applies it to every replica in
// id order, and returns the index and each replica's result.
func (l *Log) Commit(data []byte) (uint64, map[uint64]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commitLocked(func(uint64) []byte { return data })
}

// CommitFunc appends data(index) at the next index and applies it to every
// replica; data is called under the Log's lock, so entries built from
// their index commit in index order from several goroutines alike.
func (l *Log) CommitFunc(data func(index uint64) []byte) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := l.commitLocked(data)
	return i
}

func (l *Log) commitLocked(data func(index uint64) []byte) (uint64, map[uint64]any) {
	l.last++
	i := l.last
	d := data(i)
	l.entries[i] = d
	out := make(map[uint64]any, len(l.replicas))
	for _, id := range slices.Sorted(maps.Keys(l.replicas)) {
		out[id] = l.replicas[id].Apply(i, d)
	}
	return i, out
}

// Index returns the index of the last committed entry (0: none).
func (l *Log) Index() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Compacted returns the index up to which the log was compacted: the
// entries up to it are gone (0: none).
func (l *Log) Compacted() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first - 1
}

// Replica is replica id's view of the Log: the proposer side of a journal.
type Replica struct {
	l  *Log
	id uint64
}

// Replica returns replica id's view of the Log.
func (l *Log) Replica(id uint64) Replica { return Replica{l: l, id: id} }

// Propose commits data after the Log's commit latency and returns its
// index and the result of applying it on this replica. A ctx that ends
// during the latency fails the proposal, which commits all the same, as
// one raft has accepted does.
func (r Replica) Propose(ctx context.Context, data []byte) (uint64, any, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	r.l.mu.Lock()
	latency := r.l.latency
	r.l.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	commit := func(uint64) []byte { return data }
	if err := ctx.Err(); err != nil {
		r.l.commitLocked(commit) // committed; the caller no longer waits
		return 0, nil, err
	}
	index, results := r.l.commitLocked(commit)
	return index, results[r.id], nil
}

// LeaderTerm returns the term this replica believes and whether it
// believes itself the leader in it.
func (r Replica) LeaderTerm() (uint64, bool) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	ls := r.l.leases[r.id]
	return ls.term, ls.leader
}

// ReadEntries calls fn with every entry after after up to upTo, in order.
// Entries compacted away fail with ErrCompacted, entries past the last
// one with an error.
func (l *Log) ReadEntries(ctx context.Context, after, upTo uint64, fn func(uint64, []byte) error) error {
	l.reads.Add(1)
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	for {
		m := l.maxInFlight.Load()
		if n <= m || l.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	l.mu.Lock()
	block, started := l.readBlock, l.readStarted
	l.mu.Unlock()
	if block != nil {
		if started != nil {
			started <- struct{}{}
		}
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	if after+1 < l.first {
		l.mu.Unlock()
		return fmt.Errorf("%w: entries after %d (first retained %d)", ErrCompacted, after, l.first)
	}
	if upTo > l.last {
		l.mu.Unlock()
		return fmt.Errorf("fake journal: %d is past the last index %d", upTo, l.last)
	}
	var ents [][]byte
	for i := after + 1; i <= upTo; i++ {
		ents = append(ents, l.entries[i])
	}
	l.mu.Unlock()
	for k, e := range ents {
		if err := fn(after+1+uint64(k), e); err != nil {
			return err
		}
	}
	return nil
}

// MembershipAt returns the membership at index: "voters=1,2,3@" and
// index/1000.
func (l *Log) MembershipAt(index uint64) ([]byte, error) {
	return []byte("voters=1,2,3@" + strconv.FormatUint(index/1000, 10)), nil
}

// TermAt returns the term of the entry at index: 1 + index/1000.
func (l *Log) TermAt(index uint64) (uint64, error) { return 1 + index/1000, nil }

// FirstIndex returns the first retained index.
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first, nil
}

// ImageWritten records an image at index (its arguments show in Recorded)
// and compacts the log up to the newest recorded image at least the
// margin behind index, as the journal does; with FailImageWritten set it
// returns that error and records nothing.
func (l *Log) ImageWritten(ctx context.Context, index, term uint64, membership []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.imageWrittenErr != nil {
		return l.imageWrittenErr
	}
	l.images = append(l.images, index)
	l.recorded = append(l.recorded, Image{Index: index, Term: term, Membership: membership})
	var cut uint64
	for _, i := range l.images {
		if i+l.margin <= index {
			cut = max(cut, i)
		}
	}
	if cut+1 > l.first {
		for i := l.first; i <= cut; i++ {
			delete(l.entries, i)
		}
		l.first = cut + 1
	}
	return nil
}

// Images returns the indexes of the images recorded by ImageWritten, in
// call order.
func (l *Log) Images() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.images)
}

// Recorded returns ImageWritten's arguments, call by call.
func (l *Log) Recorded() []Image {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recorded)
}

// FailImageWritten makes ImageWritten return err from now on (nil: succeed
// again).
func (l *Log) FailImageWritten(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.imageWrittenErr = err
}

// SetMargin sets how far behind a new image ImageWritten keeps the log: up
// to the newest image at least n entries behind it.
func (l *Log) SetMargin(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.margin = n
}

// BlockReads makes every ReadEntries from now on send on started (buffered
// by the caller, or read by it) and then wait until release is called or
// its ctx ends. started may be nil.
func (l *Log) BlockReads(started chan struct{}) (release func()) {
	block := make(chan struct{})
	l.mu.Lock()
	l.readBlock, l.readStarted = block, started
	l.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(block) }) }
}

// Reads returns how many ReadEntries calls were made.
func (l *Log) Reads() int { return int(l.reads.Load()) }

// MaxReadsInFlight returns the most ReadEntries calls that ran at once.
func (l *Log) MaxReadsInFlight() int { return int(l.maxInFlight.Load()) }

// InstallSnapshot is what raft does when it records a snapshot at index:
// the log is replaced by the snapshot, and the next entry commits at
// index+1.
func (l *Log) InstallSnapshot(index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := l.first; i <= l.last; i++ {
		delete(l.entries, i)
	}
	l.first, l.last = index+1, index
}

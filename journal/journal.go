package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/consistency"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/diskguard"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
	"github.com/metatree/metatree/journal/internal/readround"
)

// Journal is one node of a replicated log. It is safe for concurrent use by
// multiple goroutines. Open starts it; Close stops it.
//
// Its fields are grouped by who may touch them: those Open sets before any
// goroutine starts and only reads after; the state of each of the raft
// loop (loop), the append goroutine (appender) and the applier (applier),
// which no other goroutine touches; the channels and queues between the
// goroutines; the values that are safe for concurrent use by themselves
// (atomics, and types with a lock of their own), each with its writers;
// and what j.mu guards.
type Journal struct {
	// Set by Open before any goroutine of the journal starts, and only
	// read after (token before the transport starts).
	cfg   Config
	log   *slog.Logger
	id    uint64
	token string
	// stamps is the clock of the staleness guard: wall time at Open,
	// advanced monotonically.
	stamps  stampClock
	space   *diskguard.Guard // refuses writes while the disk is nearly full
	store   *raftstore.Store
	tr      Transport
	http    *HTTPTransport // the default transport, or nil
	lock    io.Closer
	metrics *metrics // counters for Collector

	loop     loopState     // the raft loop's
	appender appenderState // the append goroutine's
	applier  applierState  // the applier's

	// The channels and queues between the goroutines, made by newJournal
	// and never replaced.
	propc   chan *proposal // proposals, to the loop
	recvc   chan inbound   // messages from peers, to the loop
	opc     chan func()    // functions the loop runs (do)
	reportc chan report    // the transport's reports, to the loop
	// appendq carries the append goroutine's work: raft's
	// MsgStorageAppend messages from the loop, and ImageWritten's store
	// operations; appendDone carries the messages back once durable.
	appendq    *appendQueue
	appendDone chan appendResult
	applyq     *applyQueue // committed entries, from the loop to the applier
	// imageReqc carries requests for a new image to requestImages (cap 1:
	// a pending request covers later ones).
	imageReqc chan struct{}
	// checkc wakes the loop (cap 1) when the applier left a report in
	// checkReport or raised the corruption alarm.
	checkc chan struct{}
	stopc  chan struct{} // closed by Close: the journal's goroutines stop
	// loopDead is closed when the raft loop stopped running (Close, or a
	// persist failure): requests to it give up.
	loopDead chan struct{}
	// stir is closed at the next leader or term change and when the raft
	// loop stops, after loopDead (it then stays closed). A proposer waiting
	// for its apply wakes on this one shared channel for any of the three
	// (submission.wait): each shared channel a select waits on is locked
	// twice a wait, against all the other proposers'.
	stir    atomic.Pointer[chan struct{}]
	done    chan struct{} // closed when Close begins: waiters give up
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool // under closeMu

	// Atomics, safe for concurrent use, grouped by their writers.
	//
	// Set by Open (the transport reads cid meanwhile); role also by the
	// applier as it applies this node's promotion.
	cid  atomic.Pointer[string] // cluster id ("" until known)
	role atomic.Uint32          // Role as recorded in ROLE

	// Written by the loop (Open sets their first values), read anywhere.
	leader    atomic.Uint64
	term      atomic.Uint64
	state     atomic.Uint32 // raft.StateType
	committed atomic.Uint64 // the durable commit index
	// lastIndexPub is the loop's lastIndex, for Receive's early check.
	lastIndexPub atomic.Uint64
	// fenceUntil, while non-zero, makes Receive refuse every sender
	// (ForceNewCluster): the node leads a cluster of itself alone, and
	// every other node is an old member it forces out. It is set before
	// the transport starts, narrowed by forceNewCluster to the index of
	// the last removal it appends, and cleared by the loop once the
	// committed entries up to that index are handed to the applier, after
	// the membership that lists the old members as removed is published
	// (Receive reads it before the membership, so a Receive that finds
	// the fence lifted finds that membership too).
	fenceUntil atomic.Uint64

	// Written by the applier (Open sets their first values), read
	// anywhere.
	applied atomic.Uint64
	lastTS  atomic.Int64 // unix nanos of the last applied leader timestamp
	// installs counts the images installed from the leader since Open: a
	// proposal waiting across one may have applied inside it (see
	// ErrOutcomeUnknown).
	installs atomic.Uint64
	// window is the cluster's dedupe window once a membership record told
	// it (0 until then, or for ever in a cluster that records none):
	// dedupeWindow.
	window atomic.Uint64
	// checkReport is the consistency check report the applier leaves for
	// the loop, which takes it to propose it (check.go); corrupt is the
	// alarm the applier raises on this member's own state.
	checkReport atomic.Pointer[[]byte]
	corrupt     atomic.Pointer[CorruptError]

	// Written by more than one goroutine, read anywhere.
	//
	// failed is the error that stopped the loop or the applier, the
	// first one (fail).
	failed atomic.Pointer[error]
	// lastImage is the index of the last image loaded (Open), installed
	// (the applier) or recorded (the append goroutine); images are the
	// images the log may be compacted to, under a lock of their own.
	lastImage atomic.Uint64
	images    imageIndexes
	// snapsOut counts the snapshot transfers in flight (no compaction
	// meanwhile): send counts them out, the loop counts their reports.
	snapsOut atomic.Int64
	// removed: this node was removed from the cluster, as the loop
	// applied it (setMembership) or a peer reported it (reportRemoved).
	removed atomic.Bool
	// campaigns counts the sends in which this node asked for (pre-)votes.
	campaigns atomic.Uint64
	// refusedRemoved counts the deliveries Receive refused because the
	// sender was removed from the cluster; refusedMsgs the messages from
	// the network refused as invalid, by Receive or the loop
	// (validate.go).
	refusedRemoved atomic.Uint64
	refusedMsgs    atomic.Uint64
	nwaiters       atomic.Int64 // len of all mu.waiters lists, changed under mu

	// Safe for concurrent use through a lock of their own.
	//
	// checker holds the consistency checks (check.go): the applier's
	// record of recent marks and the raised alarm.
	checker   consistency.Checker
	rounds    readround.Rounds // linearizable reads (readindex.go)
	keys      keySource        // Propose's idempotency keys
	waitChans sync.Pool        // of chan applyResult (cap 2, empty): addWaiter
	doneChans sync.Pool        // of chan error (cap 1, empty): doneChan

	mu struct {
		sync.Mutex
		leaderCh chan struct{} // closed at the next leader/term change
		// commitCh is closed when the durable commit index (committed)
		// advances; ImageWritten waits on it.
		commitCh   chan struct{}
		appliedCh  chan struct{}          // closed at the next applied advance
		waiters    map[[16]byte]*waiter   // the head of each key's list
		membership *membership.Membership // latest applied membership
		// learned holds the addresses of members the membership does
		// not name yet, taken from their requests (learnpeer.go).
		learned map[uint64]string
	}
}

// loopState is the raft loop's state: owned by the loop goroutine (run,
// and the functions it runs, those handed to it through do included).
// Open sets it up before the loop starts; nothing else reads or writes it
// once the loop runs.
type loopState struct {
	rn *raft.RawNode
	// confQueue holds the keys of the membership changes proposed by this
	// leader and not yet seen in a Ready.
	confQueue [][16]byte
	// confBase is the membership as of the last membership change or
	// version entry handed to the applier, starting from the membership as
	// of the index the state machine was loaded at: the next change
	// applies to it. It holds replicated state only, so a replay from an
	// older image reproduces each historical record and every replica
	// decides each change alike; the published membership (mu.membership)
	// may be newer during a replay.
	confBase *membership.Membership
	// pendingVersion is the highest cluster version in a version entry this
	// node proposed or appended and has not yet handed to the applier, and
	// pendingVersionAt that entry's index (for one proposed and not yet in
	// a Ready, the lowest index it can have): the leader refuses a member
	// that could not read it before its entry applies (checkConfChange).
	pendingVersion   uint32
	pendingVersionAt uint64
	// removedPeers are the peers a membership change removed, left in the
	// transport until the Ready's messages are sent.
	removedPeers []uint64
	// ticks counts the ticks the loop gave raft; heard is the count at
	// which the last message from each peer arrived: which voters
	// checkConfChange counts as reachable.
	ticks uint64
	heard map[uint64]uint64
	// lastTick is when the loop last took a tick (noteTick).
	lastTick time.Time
	// steppedSnaps are the indexes of the snapshot messages stepped since
	// the last Ready: settleFetched releases those raft did not take.
	steppedSnaps []uint64
	// heldApplyAcks are raft's acknowledgements of committed entries
	// handed to the applier, held while the apply queue is full
	// (releaseApplyAcks).
	heldApplyAcks []*raftpb.Message
	// selfVotes counts this node's votes for itself that raft holds back
	// until the append goroutine made its term and vote durable (see
	// tick).
	selfVotes int
	// batch holds the normal proposals taken since the last flush: they
	// go to raft in one MsgProp, so raft appends them together and sends
	// one append message per follower for all of them, not one each.
	batch      []*proposal
	batchBytes uint64
	// lastIndex is raft's last log index as of the last Ready; logBound
	// is lastIndex lowered by the appends and snapshots stepped since,
	// which may have cut the log's tail.
	lastIndex, logBound uint64
	// stepped counts the entries this node's proposals added to raft's
	// log since the last Ready (landsAt).
	stepped uint64
	// readFloor is the lowest index this node answers a ReadIndex with
	// while it leads: its last index when it took the lead (0 while it
	// does not lead; readindex.go).
	readFloor uint64
}

// appenderState is the append goroutine's state (appendLoop): Open sets
// it before the goroutine starts; nothing else reads or writes it once the
// goroutine runs.
type appenderState struct {
	// persistedTerm and persistedVote are the HardState's term and vote as
	// last written: changing them needs an fsync.
	persistedTerm, persistedVote uint64
}

// applierState is the applier's state (applyLoop): Open sets it before the
// applier starts; nothing else reads or writes it once the applier runs.
type applierState struct {
	// dedupe is the dedupe window the applier judges user entries by.
	dedupe *dedupe.Window
	// membersIndex is the membership index the MEMBERS file holds: older
	// memberships are not written again.
	membersIndex uint64
}

type applyResult struct {
	index uint64
	value any
	err   error
	since uint64 // of the expired copy, with errExpired
	// imaged: the copy applied before an image this node installed, so
	// its Apply result (value) is not known here.
	imaged bool
}

type inbound struct {
	msgs []*raftpb.Message
	done chan error
}

type report struct {
	id       uint64
	snapshot bool
	ok       bool
}

// Close stops the node: the raft loop, the applier and the transport, then
// closes the log and releases the data dir. Waiting calls return ErrClosed.
// Close is idempotent and returns after every goroutine has exited.
func (j *Journal) Close() error {
	j.closeMu.Lock()
	defer j.closeMu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	close(j.done)
	close(j.stopc)
	j.applyq.close()
	j.wg.Wait()
	var errs []error
	if err := j.tr.Close(); err != nil {
		errs = append(errs, operr.Errorf("journal: close transport: %w", err))
	}
	if err := j.store.Close(); err != nil {
		errs = append(errs, operr.Errorf("journal: close log: %w", err))
	}
	if err := j.lock.Close(); err != nil {
		errs = append(errs, operr.Errorf("journal: unlock: %w", err))
	}
	j.log.Info("journal closed")
	return errors.Join(errs...)
}

// Handler returns the HTTP handler of the default transport; mount it under
// "/raft/" on the server listening on Config.Addr. With a custom transport
// it answers 404. A joining node is reachable only once this is mounted; to
// serve it while Open is still running, create the transport with
// NewHTTPTransport, mount its Handler first and pass it as
// Config.Transport.
func (j *Journal) Handler() http.Handler {
	if j.http == nil {
		return http.NotFoundHandler()
	}
	return j.http.Handler()
}

// Status is a point-in-time view of a node.
type Status struct {
	ID        uint64
	ClusterID string
	Role      Role
	// State is raft's state (StateFollower, StateCandidate,
	// StatePreCandidate or StateLeader).
	State State
	// Leader is the id of the leader this node knows (0: none).
	Leader    uint64
	Term      uint64
	Applied   uint64
	Committed uint64
	// Image is the index of the last image loaded or written (0: none).
	Image uint64
	// Stale is true when the last replayed leader timestamp is older than
	// Config.StaleAfter (CheckFresh fails).
	Stale bool
	// LastTimestamp is the leader clock last replayed (zero: none yet).
	LastTimestamp time.Time
	// Removed is true once this node applied its own removal, or once a
	// member refused its messages because that member applied it
	// (ErrRemoved: a node removed while its progress lagged never receives
	// the append that commits its removal).
	Removed bool
	// RefusedMessages counts the raft messages from the network refused as
	// invalid (ones raft would crash on or no correct peer sends); each is
	// logged with its reason.
	RefusedMessages uint64
	// Members is the membership as of the applied index.
	Members []Member
	// Err is the error that stopped the applier, if any (the node then
	// stops applying but keeps running; Close it). A *HaltError (ErrHalted)
	// is an entry this binary cannot read: restart it with one that can.
	Err error
	// ClusterVersion is the cluster's format version as of the committed
	// entries this node has seen: writers write no newer format (see
	// Config.MaxVersion).
	ClusterVersion uint32
	// Replaced lists the clusters this one replaced by restores of their
	// backups, oldest first, as of the applied index (nil: none). The
	// heartbeat sends it, so that workers that follow one of them move
	// to this cluster.
	Replaced []string
	// Alarm is the cluster's consistency alarm as the log applied here
	// tells it (nil: none): the voters whose state digest differed from
	// the majority's, or that no digest had a majority (then writes stop
	// cluster-wide). A member in the minority also has its *CorruptError
	// in Err.
	Alarm *Alarm
}

// IsLeader reports whether the status is of the leader.
func (s Status) IsLeader() bool { return s.Leader == s.ID && s.State == StateLeader }

// Status returns the node's current status.
func (j *Journal) Status() Status {
	st := Status{
		ID:              j.id,
		ClusterID:       j.cluster(),
		Role:            Role(j.role.Load()),
		State:           State(j.state.Load()),
		Leader:          j.leader.Load(),
		Term:            j.term.Load(),
		Applied:         j.applied.Load(),
		Committed:       j.committed.Load(),
		Image:           j.lastImage.Load(),
		Removed:         j.removed.Load(),
		RefusedMessages: j.refusedMsgs.Load(),
		Stale:           j.CheckFresh() != nil,
	}
	if ts := j.lastTS.Load(); ts != 0 {
		st.LastTimestamp = time.Unix(0, ts)
	}
	if e := j.failed.Load(); e != nil {
		st.Err = *e
	} else if err := j.store.Halted(); err != nil {
		st.Err = haltCause(err) // the loop is stopping
	}
	st.Alarm = j.checker.Current()
	j.mu.Lock()
	st.Members = j.mu.membership.List()
	st.ClusterVersion = j.mu.membership.ClusterVersion()
	st.Replaced = slices.Clone(j.mu.membership.Replaced)
	j.mu.Unlock()
	return st
}

// Leadership returns a channel that is closed at the next change of leader
// or term as this node sees it. Read Status for the new state, then call
// Leadership again for the next change; no change is ever missed between
// the two calls if Leadership is called before Status.
func (j *Journal) Leadership() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.leaderCh
}

// CheckFresh returns nil when this node's replayed state is within
// Config.StaleAfter of the leader's clock, and an error wrapping ErrStale
// otherwise (no timestamp replayed yet counts as stale); on a member whose
// corruption alarm is raised, the *CorruptError (ErrCorrupt). It compares the
// last leader timestamp replayed here with the local clock, so the nodes'
// clocks must agree to well within StaleAfter (as Doris's
// meta_delay_toleration_second assumes) when their processes start; both
// sides then advance by the monotonic clock (stampClock), so a later step
// of either wall clock changes nothing.
func (j *Journal) CheckFresh() error {
	if c := j.corruptErr(); c != nil {
		return c
	}
	if err := j.pendingErr(); err != nil {
		return err
	}
	ts := j.lastTS.Load()
	if ts == 0 {
		return fmt.Errorf("%w: no leader timestamp replayed yet", ErrStale)
	}
	age := j.stamps.now().Sub(time.Unix(0, ts))
	if age > j.cfg.StaleAfter {
		return fmt.Errorf("%w: last leader timestamp is %v old (tolerance %v)", ErrStale, age.Round(time.Millisecond), j.cfg.StaleAfter)
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return b
}

// loopErr is the error for a request the raft loop will not serve.
func (j *Journal) loopErr() error {
	if e := j.failed.Load(); e != nil {
		return fmt.Errorf("%w: %w", ErrClosed, *e)
	}
	return ErrClosed
}

func (j *Journal) setCluster(id string) { j.cid.Store(&id) }

// cluster returns the cluster id ("" while a joining node has not joined).
func (j *Journal) cluster() string {
	if p := j.cid.Load(); p != nil {
		return *p
	}
	return ""
}

package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/journal/internal/raftstore"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Journal is one node of a replicated log. It is safe for concurrent use by
// multiple goroutines. Open starts it; Close stops it.
type Journal struct {
	cfg   Config
	log   *slog.Logger
	space *spaceGuard // refuses writes while the disk is nearly full
	// stamps is the clock of the staleness guard: wall time at Open,
	// advanced monotonically.
	stamps stampClock
	id     uint64
	cid    atomic.Pointer[string] // cluster id (set once, before or during Open)
	token  string
	role   atomic.Uint32 // Role as recorded in ROLE (changes on promotion)

	store *raftstore.Store
	tr    Transport
	http  *HTTPTransport // the default transport, or nil
	lock  io.Closer

	rn *raft.RawNode // owned by the loop goroutine once started
	// appendq carries raft's MsgStorageAppend messages from the loop to the
	// append goroutine; appendDone carries them back once durable.
	appendq    *appendQueue
	appendDone chan appendResult
	// persistedTerm and persistedVote are the HardState's term and vote as
	// last written (append goroutine only): changing them needs an fsync.
	persistedTerm, persistedVote uint64
	// confQueue holds the keys of the membership changes proposed by this
	// leader and not yet seen in a Ready (loop goroutine only).
	confQueue [][16]byte
	// removedPeers are the peers a membership change removed, left in the
	// transport until the Ready's messages are sent (loop goroutine only).
	removedPeers []uint64
	// heard is when the last message from each peer arrived (loop
	// goroutine only): which voters checkConfChange counts as reachable.
	heard map[uint64]time.Time
	// steppedSnaps are the indexes of the snapshot messages stepped since
	// the last Ready (loop goroutine only): settleFetched releases those
	// raft did not take.
	steppedSnaps []uint64
	// heldApplyAcks are raft's acknowledgements of committed entries
	// handed to the applier, held while the apply queue is full (loop
	// goroutine only; releaseApplyAcks).
	heldApplyAcks []*raftpb.Message
	// batch holds the normal proposals taken since the last flush: they
	// go to raft in one MsgProp, so raft appends them together and sends
	// one append message per follower for all of them, not one each.
	batch      []*proposal
	batchBytes uint64

	propc   chan *proposal
	recvc   chan inbound
	opc     chan func()
	reportc chan report
	stopc   chan struct{} // closed by Close: the loop and applier stop
	// loopDead is closed when the raft loop stopped running (Close, or a
	// persist failure): requests to it give up.
	loopDead chan struct{}
	done     chan struct{} // closed when Close begins: waiters give up
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool

	applyq *applyQueue
	// imageReqc carries requests for a new image to requestImages (cap 1:
	// a pending request covers later ones).
	imageReqc chan struct{}

	// Written by the loop, read anywhere.
	leader    atomic.Uint64
	term      atomic.Uint64
	state     atomic.Uint32 // raft.StateType
	committed atomic.Uint64
	lastImage atomic.Uint64
	snapsOut  atomic.Int64  // snapshot transfers in flight (no compaction meanwhile)
	removed   atomic.Bool   // this node was removed from the cluster
	campaigns atomic.Uint64 // Readys in which this node asked for (pre-)votes
	// refusedRemoved counts deliveries refused because the sender was
	// removed from the cluster.
	refusedRemoved atomic.Uint64
	// refusedMsgs counts messages from the network refused as invalid
	// (validate.go); lastIndexPub is lastIndex for Receive's early check.
	refusedMsgs  atomic.Uint64
	lastIndexPub atomic.Uint64
	// lastIndex is raft's last log index as of the last Ready; logBound
	// is lastIndex lowered by the appends and snapshots stepped since,
	// which may have cut the log's tail (loop goroutine only).
	lastIndex, logBound uint64

	// Written by the applier.
	applied atomic.Uint64
	lastTS  atomic.Int64 // unix nanos of the last applied leader timestamp
	failed  atomic.Pointer[error]

	nwaiters atomic.Int64 // len of all mu.waiters lists

	metrics *metrics // counters for Collector

	mu struct {
		sync.Mutex
		leaderCh chan struct{} // closed at the next leader/term change
		// commitCh is closed when the durable commit index (committed)
		// advances; ImageWritten waits on it.
		commitCh   chan struct{}
		appliedCh  chan struct{} // closed at the next applied advance
		waiters    map[[16]byte][]chan applyResult
		membership *membership // latest applied membership
	}
	dedupe *dedupe // applier only

	rounds readRounds // linearizable reads (readindex.go)
	// membersIndex is the membership index the MEMBERS file holds
	// (applier only, after Open): older memberships are not written again.
	membersIndex uint64
}

type applyResult struct {
	index uint64
	value any
	err   error
	since uint64 // of the expired copy, with errExpired
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

// identity lets the HTTP transport stamp and check requests.
type identity interface {
	identity() (clusterID, token string)
}

func (j *Journal) identity() (string, string) { return j.cluster(), j.token }

// Open starts a journal node: it locks and reads (or creates) the data dir,
// joins the cluster through a helper when asked to, opens the Pebble log,
// loads the newest image through Config.Snapshots, and starts the raft loop.
// The returned Journal replays the log in the background; WaitApplied or
// ReadBarrier wait for it.
func Open(ctx context.Context, cfg Config) (_ *Journal, err error) {
	cfg.fillDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	fs := cfg.FS
	if err := durable.MkdirAll(fs, cfg.Dir); err != nil {
		return nil, fmt.Errorf("journal: create data dir %s: %w", cfg.Dir, err)
	}
	lock, err := fs.Lock(filepath.Join(cfg.Dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("journal: lock %s: %w: %w", cfg.Dir, ErrLocked, err)
	}
	j := &Journal{
		cfg:        cfg,
		log:        cfg.Logger.With("node", cfg.ID),
		id:         cfg.ID,
		lock:       lock,
		propc:      make(chan *proposal, cfg.ProposalQueue),
		recvc:      make(chan inbound, 256),
		opc:        make(chan func(), 64),
		reportc:    make(chan report, 1024),
		stopc:      make(chan struct{}),
		loopDead:   make(chan struct{}),
		done:       make(chan struct{}),
		applyq:     newApplyQueue(cfg.ApplyQueueBytes, cfg.ApplyQueueBatches),
		appendq:    newAppendQueue(),
		appendDone: make(chan appendResult, 16),
		dedupe:     newDedupe(cfg.DedupeWindow),
		heard:      map[uint64]time.Time{},
		imageReqc:  make(chan struct{}, 1),
		metrics:    newMetrics(),
	}
	j.mu.leaderCh = make(chan struct{})
	j.mu.commitCh = make(chan struct{})
	j.stamps = newStampClock(cfg.Clock)
	j.space = newSpaceGuard(fs, cfg.Dir, cfg.ReserveBytes, cfg.BallastBytes, j.log)
	if err := j.space.check(); err != nil {
		j.log.Warn("free space check failed", "err", err)
	}
	j.mu.appliedCh = make(chan struct{})
	j.mu.waiters = map[[16]byte][]chan applyResult{}
	j.mu.membership = newMembership()
	defer func() {
		if err != nil {
			j.abortOpen()
		}
	}()

	ver, haveVersion, err := readKV(fs, filepath.Join(cfg.Dir, "VERSION"))
	if err != nil {
		return nil, err
	}
	var joinResp *JoinResponse
	bootstrap := false
	switch {
	case haveVersion:
		if err := j.checkRestart(ver); err != nil {
			return nil, err
		}
	case cfg.Bootstrap:
		bootstrap = true
		cid := cfg.ClusterID
		if cid == "" {
			cid = uuid.NewString()
		}
		j.setCluster(cid)
		j.token = cfg.Token
		j.role.Store(uint32(Follower))
	case cfg.Join != "":
		j.token = cfg.Token
		j.role.Store(uint32(cfg.Role))
		if cfg.Role == RoleUnset {
			j.role.Store(uint32(Follower))
		}
	default:
		return nil, fmt.Errorf("journal: %s has no VERSION file: set Config.Bootstrap or Config.Join", cfg.Dir)
	}

	j.store, err = raftstore.Open(raftstore.Options{FS: fs, Dir: filepath.Join(cfg.Dir, "journal"), Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}

	j.tr = cfg.Transport
	if j.tr == nil {
		j.http = NewHTTPTransport(HTTPOptions{
			Client: cfg.HTTPClient, Scheme: cfg.Scheme, Logger: j.log,
			QueueMsgs: cfg.SendQueueMsgs, QueueBytes: cfg.SendQueueBytes, MaxBodyBytes: cfg.MaxBodyBytes,
		})
		j.tr = j.http
	} else if h, ok := j.tr.(*HTTPTransport); ok {
		j.http = h
	}
	if err := j.tr.Start(j.id, j); err != nil {
		j.tr = nil
		return nil, fmt.Errorf("journal: start transport: %w", err)
	}

	if err := j.initLog(haveVersion, bootstrap); err != nil {
		return nil, err
	}
	if cfg.ForceNewCluster {
		if err := j.forceNewCluster(haveVersion); err != nil {
			return nil, err
		}
	}
	if !haveVersion && !bootstrap {
		joinResp, err = j.join(ctx)
		if err != nil {
			return nil, err
		}
	}
	if joinResp != nil {
		m := newMembership()
		for _, mem := range joinResp.Members {
			m.Members[mem.ID] = mem
		}
		if err := j.writeMembers(m); err != nil {
			return nil, err
		}
	}
	if !haveVersion {
		// VERSION last: it marks the dir as initialised, so a crash
		// before it leaves a dir that bootstraps or joins again.
		if err := writeKV(fs, cfg.Dir, "ROLE", [][2]string{{"role", Role(j.role.Load()).String()}}); err != nil {
			return nil, err
		}
		if err := writeVersion(fs, cfg.Dir, j.cluster(), j.token, j.id); err != nil {
			return nil, err
		}
	}

	image, err := j.loadState(ctx, joinResp)
	if err != nil {
		return nil, err
	}
	conf, err := j.restartPoint(image)
	if err != nil {
		return nil, err
	}
	hs, _, err := j.store.InitialState()
	if err != nil {
		return nil, fmt.Errorf("journal: initial state: %w", err)
	}
	rc := &raft.Config{
		ID:            j.id,
		ElectionTick:  cfg.ElectionTicks,
		HeartbeatTick: cfg.HeartbeatTicks,
		Storage:       raftStorage{Store: j.store, j: j, conf: conf},
		// raft restarts from the index the loaded state holds, with the
		// ConfState as of that index, and re-delivers the committed
		// entries after it: their conf changes are re-applied to raft,
		// their user entries to the state machine.
		Applied:                   j.applied.Load(),
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  cfg.MaxCommittedBytesPerReady,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxInflightBytes:          cfg.MaxInflightBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		// A follower's data proposals travel to the leader inside raft's
		// own message stream (batched with everything else), not one HTTP
		// request each; the proposer waits for the entry's key to apply
		// locally and re-proposes (same key) if it does not in time.
		DisableProposalForwarding: false,
		// Entries and HardState are written by the append goroutine, which
		// commits everything queued meanwhile in one synced batch; the
		// loop keeps ticking, stepping and sending during the fsync.
		AsyncStorageWrites: true,
		Logger:             raftstore.NewRaftLogger(j.log),
	}
	j.rn, err = raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("journal: start raft: %w", err)
	}
	j.persistedTerm, j.persistedVote = hs.GetTerm(), hs.GetVote()
	j.committed.Store(hs.GetCommit())
	j.term.Store(hs.GetTerm())
	j.state.Store(uint32(raft.StateFollower))

	j.wg.Go(j.run)
	j.wg.Go(j.watchSpace)
	j.wg.Go(j.appendLoop)
	j.wg.Go(j.applyLoop)
	if r, ok := cfg.Snapshots.(ImageRequester); ok {
		j.wg.Go(func() { j.requestImages(r) })
	}
	j.log.Info("journal open", "cluster", j.cluster(), "role", Role(j.role.Load()), "applied", j.applied.Load(),
		"commit", hs.GetCommit(), "bootstrap", bootstrap, "join", cfg.Join)
	return j, nil
}

// checkRestart validates the VERSION and ROLE files against the config.
func (j *Journal) checkRestart(ver map[string]string) error {
	j.setCluster(ver["cluster_id"])
	j.token = ver["token"]
	if j.cluster() == "" {
		return fmt.Errorf("journal: %s: VERSION has no cluster_id", j.cfg.Dir)
	}
	if j.cfg.ClusterID != "" && j.cfg.ClusterID != j.cluster() {
		return fmt.Errorf("journal: %w: data dir belongs to cluster %s, config says %s", ErrClusterMismatch, j.cluster(), j.cfg.ClusterID)
	}
	if j.cfg.Token != "" && j.cfg.Token != j.token {
		return fmt.Errorf("journal: %w: token differs from the data dir's VERSION", ErrClusterMismatch)
	}
	if err := checkNodeID(j.cfg.Dir, ver, j.id); err != nil {
		return err
	}
	roleKV, ok, err := readKV(j.cfg.FS, filepath.Join(j.cfg.Dir, "ROLE"))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("journal: %s: VERSION without ROLE file", j.cfg.Dir)
	}
	role, err := ParseRole(roleKV["role"])
	if err != nil {
		return fmt.Errorf("journal: %s: ROLE: %w", j.cfg.Dir, err)
	}
	if j.cfg.Role != RoleUnset && j.cfg.Role != role {
		return fmt.Errorf("journal: %w: configured %s, data dir says %s", ErrRoleMismatch, j.cfg.Role, role)
	}
	j.role.Store(uint32(role))
	return nil
}

// join asks the helper to admit this node and learns the cluster id and
// members from it.
func (j *Journal) join(ctx context.Context) (*JoinResponse, error) {
	req := &JoinRequest{ID: j.id, Addr: j.cfg.Addr, Role: Role(j.role.Load()), ClusterID: j.cfg.ClusterID, Token: j.token}
	resp, err := j.tr.Join(ctx, j.cfg.Join, req)
	if err != nil {
		return nil, fmt.Errorf("journal: join through %s: %w", j.cfg.Join, err)
	}
	if j.cfg.ClusterID != "" && resp.ClusterID != j.cfg.ClusterID {
		return nil, fmt.Errorf("journal: join through %s: %w: cluster is %s, config says %s",
			j.cfg.Join, ErrClusterMismatch, resp.ClusterID, j.cfg.ClusterID)
	}
	for _, m := range resp.Members {
		if m.ID == j.id && m.Role != req.Role {
			return nil, fmt.Errorf("journal: join: %w: cluster has node %d as %s, config says %s", ErrRoleMismatch, j.id, m.Role, req.Role)
		}
	}
	j.setCluster(resp.ClusterID)
	return resp, nil
}

// loadState restores membership, the newest image and the dedupe window
// before raft starts. It returns the membership stored with the loaded
// image (nil: no image, or one without it).
func (j *Journal) loadState(ctx context.Context, joinResp *JoinResponse) (*membership, error) {
	m := newMembership()
	if blob, err := j.store.MembershipAt(math.MaxUint64); err != nil && !errors.Is(err, raftstore.ErrNoMembership) {
		return nil, fmt.Errorf("journal: load membership: %w", err)
	} else if len(blob) > 0 {
		if m, err = decodeMembership(blob); err != nil {
			return nil, fmt.Errorf("journal: stored membership: %w", err)
		}
	}
	file, err := j.readMembers()
	if err != nil {
		return nil, err
	}
	// Peers to reach: the newest durable view, plus any address either
	// view knows (an older address is harmless; a missing one strands us).
	addrs := map[uint64]string{}
	if file != nil {
		for id, mem := range file.Members {
			addrs[id] = mem.Addr
		}
		if file.Index > m.Index || len(m.Members) == 0 {
			m = file
		}
	}
	for id, mem := range m.Members {
		addrs[id] = mem.Addr
	}
	first, err := j.store.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("journal: first index: %w", err)
	}
	var imageIndex uint64
	var image *membership // the membership stored with the image
	if j.cfg.Snapshots != nil {
		idx, blob, err := j.cfg.Snapshots.LoadLatest(ctx, first-1)
		if err != nil {
			return nil, fmt.Errorf("journal: load image: %w", err)
		}
		if idx > 0 {
			if idx < first-1 {
				return nil, fmt.Errorf("journal: image %d is older than the log's start %d", idx, first)
			}
			imageIndex = idx
			j.lastImage.Store(idx)
			if len(blob) > 0 {
				im, err := decodeMembership(blob)
				if err != nil {
					return nil, fmt.Errorf("journal: image %d: %w", idx, err)
				}
				j.dedupe.reset(im.Keys)
				image = im
				if len(m.Members) == 0 {
					m = im.clone()
				}
			}
		}
	}
	if first > 1 && imageIndex == 0 {
		return nil, fmt.Errorf("journal: the log starts at %d but no image covers the entries before it", first)
	}
	// An image without its dedupe window: rebuild it from the retained log
	// before the image. (With one, the image's keys are that same window,
	// and the log may not hold it: a node restored from a peer's image.)
	if imageIndex > 0 && image == nil {
		d, err := j.dedupeAt(imageIndex)
		if err != nil {
			return nil, fmt.Errorf("journal: rebuild dedupe window: %w", err)
		}
		j.dedupe = d
	}
	j.applied.Store(imageIndex)
	m.Keys = nil
	j.mu.Lock()
	j.mu.membership = m
	j.mu.Unlock()
	for id, addr := range addrs {
		if id != j.id && addr != "" && !m.isRemoved(id) {
			j.tr.SetPeer(id, addr)
		}
	}
	return image, nil
}

// abortOpen releases what a failed Open acquired.
func (j *Journal) abortOpen() {
	close(j.loopDead)
	close(j.done)
	close(j.stopc)
	if j.tr != nil {
		_ = j.tr.Close()
	}
	if j.store != nil {
		_ = j.store.Close()
	}
	_ = j.lock.Close()
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
		errs = append(errs, fmt.Errorf("journal: close transport: %w", err))
	}
	if err := j.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("journal: close log: %w", err))
	}
	if err := j.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("journal: unlock: %w", err))
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
	// State is raft's state: "StateFollower", "StateCandidate",
	// "StateLeader" or "StatePreCandidate".
	State string
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
	// Removed is true once this node applied its own removal.
	Removed bool
	// RefusedMessages counts the raft messages from the network refused as
	// invalid (ones raft would crash on or no correct peer sends); each is
	// logged with its reason.
	RefusedMessages uint64
	// Members is the membership as of the applied index.
	Members []Member
	// Err is the error that stopped the applier, if any (the node then
	// stops applying but keeps running; Close it).
	Err error
}

// IsLeader reports whether the status is of the leader.
func (s Status) IsLeader() bool { return s.Leader == s.ID && s.State == raft.StateLeader.String() }

// Status returns the node's current status.
func (j *Journal) Status() Status {
	st := Status{
		ID:              j.id,
		ClusterID:       j.cluster(),
		Role:            Role(j.role.Load()),
		State:           raft.StateType(j.state.Load()).String(),
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
	j.mu.Lock()
	st.Members = j.mu.membership.list()
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
// otherwise (no timestamp replayed yet counts as stale). It compares the
// last leader timestamp replayed here with the local clock, so the nodes'
// clocks must agree to well within StaleAfter (as Doris's
// meta_delay_toleration_second assumes) when their processes start; both
// sides then advance by the monotonic clock (stampClock), so a later step
// of either wall clock changes nothing.
func (j *Journal) CheckFresh() error {
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

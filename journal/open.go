package journal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/google/uuid"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/diskguard"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// Open starts a journal node: it locks and reads (or creates) the data dir,
// joins the cluster through a helper when asked to, opens the Pebble log,
// loads the newest image through Config.Snapshots, and starts the raft loop.
// The returned Journal replays the log in the background; WaitApplied or
// ReadBarrier wait for it.
func Open(ctx context.Context, cfg Config) (_ *Journal, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	j, err := newJournal(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			j.abortOpen()
		}
	}()
	mode, err := j.readStartMode()
	if err != nil {
		return nil, err
	}
	if err := j.openStore(); err != nil {
		return nil, err
	}
	if err := j.startTransport(); err != nil {
		return nil, err
	}
	joinResp, err := j.initDataDir(ctx, mode)
	if err != nil {
		return nil, err
	}
	hs, err := j.startRaft(ctx, joinResp)
	if err != nil {
		return nil, err
	}
	j.startGoroutines()
	j.log.Info("journal open", "cluster", j.cluster(), "role", Role(j.role.Load()), "applied", j.applied.Load(),
		"commit", hs.GetCommit(), "bootstrap", mode.bootstrap, "join", cfg.Join)
	return j, nil
}

// newJournal creates the data dir if it is missing, locks it, and returns
// a Journal with its channels and queues made and nothing started.
func newJournal(cfg Config) (*Journal, error) {
	fs := cfg.FS
	if err := durable.MkdirAll(fs, cfg.Dir); err != nil {
		return nil, operr.Errorf("journal: create data dir %s: %w", cfg.Dir, err)
	}
	lock, err := fs.Lock(filepath.Join(cfg.Dir, "LOCK"))
	if err != nil {
		return nil, operr.Errorf("journal: lock %s: %w: %w", cfg.Dir, ErrLocked, err)
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
		imageReqc:  make(chan struct{}, 1),
		checkc:     make(chan struct{}, 1),
		metrics:    newMetrics(),
		loop:       loopState{heard: map[uint64]uint64{}},
		applier:    applierState{dedupe: dedupe.New(cfg.DedupeWindow)},
	}
	j.mu.leaderCh = make(chan struct{})
	stir := make(chan struct{})
	j.stir.Store(&stir)
	j.mu.commitCh = make(chan struct{})
	j.rounds.NewRun()
	j.stamps = newStampClock(cfg.Clock)
	j.space = diskguard.New(fs, cfg.Dir, cfg.ReserveBytes, cfg.BallastBytes, j.log)
	if err := j.space.Check(); err != nil {
		j.log.Warn("free space check failed", "err", err)
	}
	j.mu.appliedCh = make(chan struct{})
	j.mu.waiters = map[[16]byte]*waiter{}
	j.mu.membership = membership.New()
	j.loop.confBase = membership.New()
	if cfg.ForceNewCluster {
		// Before the transport starts: no message of an old member reaches
		// raft while Open reads the log it rewrites (forceNewCluster).
		j.fenceUntil.Store(math.MaxUint64)
	}
	return j, nil
}

// startMode is how Open starts the node, by the data dir and the Config.
type startMode struct {
	// restart: the dir has a VERSION file, so it was initialised before;
	// bootstrap and join are ignored.
	restart bool
	// bootstrap: a new cluster starts here. Neither flag: the node joins
	// through Config.Join.
	bootstrap bool
}

// readStartMode reads VERSION and decides the start mode: a restart checks
// the dir against the Config; a bootstrap or a join takes the cluster id,
// token and role from the Config.
func (j *Journal) readStartMode() (startMode, error) {
	cfg := j.cfg
	ver, haveVersion, err := datadir.ReadKV(cfg.FS, filepath.Join(cfg.Dir, "VERSION"))
	if err != nil {
		return startMode{}, err
	}
	switch {
	case haveVersion:
		if err := j.checkRestart(ver); err != nil {
			return startMode{}, err
		}
		return startMode{restart: true}, nil
	case cfg.Bootstrap:
		cid := cfg.ClusterID
		if cid == "" {
			cid = uuid.NewString()
		}
		j.setCluster(cid)
		j.token = cfg.Token
		j.role.Store(uint32(Follower))
		return startMode{bootstrap: true}, nil
	case cfg.Join != "":
		j.token = cfg.Token
		j.role.Store(uint32(cfg.Role))
		if cfg.Role == RoleUnset {
			j.role.Store(uint32(Follower))
		}
		return startMode{}, nil
	default:
		return startMode{}, fmt.Errorf("journal: %s has no VERSION file: set Config.Bootstrap or Config.Join", cfg.Dir)
	}
}

// openStore opens the Pebble raft log in the data dir's journal/.
func (j *Journal) openStore() error {
	store, err := raftstore.Open(raftstore.Options{FS: j.cfg.FS, Dir: filepath.Join(j.cfg.Dir, "journal"), Logger: j.cfg.Logger})
	if err != nil {
		return operr.Errorf("journal: %w", err)
	}
	j.store = store
	return nil
}

// startTransport starts Config.Transport, or an HTTP transport of the
// journal's own when there is none, delivering to this journal.
func (j *Journal) startTransport() error {
	cfg := j.cfg
	j.tr = cfg.Transport
	if j.tr == nil {
		j.http = NewHTTPTransport(HTTPOptions{
			Client: cfg.HTTPClient, Scheme: cfg.Scheme, TLS: cfg.TLS, Logger: j.log,
			QueueMsgs: cfg.SendQueueMsgs, QueueBytes: cfg.SendQueueBytes, MaxBodyBytes: cfg.MaxBodyBytes,
		})
		j.tr = j.http
	} else if h, ok := j.tr.(*HTTPTransport); ok {
		j.http = h
	}
	if j.http != nil {
		// The HTTP transport stamps and checks every peer request with the
		// cluster id (known once the node bootstrapped or joined) and token.
		j.http.setIdentity(j.cluster, j.token, j.cfg.Addr)
	}
	if err := j.tr.Start(j.id, receiver{j}); err != nil {
		j.tr = nil
		return operr.Errorf("journal: start transport: %w", err)
	}
	return nil
}

// initDataDir prepares the log and, on a first start, initialises the data
// dir: a joining node joins through its helper and writes the members it
// was told of; then ROLE and VERSION. VERSION goes last: it marks the dir
// as initialised, so a crash before it leaves a dir that bootstraps or
// joins again. The join's answer (nil unless the node joined) is returned.
func (j *Journal) initDataDir(ctx context.Context, mode startMode) (*JoinResponse, error) {
	if err := j.initLog(mode.restart, mode.bootstrap); err != nil {
		return nil, err
	}
	if j.cfg.ForceNewCluster {
		if err := j.forceNewCluster(mode.restart); err != nil {
			return nil, err
		}
	}
	if mode.restart {
		return nil, nil
	}
	var joinResp *JoinResponse
	if !mode.bootstrap {
		var err error
		joinResp, err = j.join(ctx)
		if err != nil {
			return nil, err
		}
		m := membership.New()
		for _, mem := range joinResp.Members {
			m.Members[mem.ID] = mem
		}
		if err := j.writeMembers(m); err != nil {
			return nil, err
		}
	}
	fs, dir := j.cfg.FS, j.cfg.Dir
	if err := datadir.WriteRole(fs, dir, Role(j.role.Load())); err != nil {
		return nil, err
	}
	if err := datadir.WriteVersion(fs, dir, j.cluster(), j.token, j.id); err != nil {
		return nil, err
	}
	return joinResp, nil
}

// startRaft loads the newest state (an image and the membership as of its
// index), finds the point raft restarts from, and creates the raft node
// with the HardState the log holds, which it returns.
func (j *Journal) startRaft(ctx context.Context, joinResp *JoinResponse) (*raftpb.HardState, error) {
	cfg := j.cfg
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
		return nil, operr.Errorf("journal: initial state: %w", err)
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
	j.loop.rn, err = raft.NewRawNode(rc)
	if err != nil {
		return nil, operr.Errorf("journal: start raft: %w", err)
	}
	j.appender.persistedTerm, j.appender.persistedVote = hs.GetTerm(), hs.GetVote()
	j.committed.Store(hs.GetCommit())
	j.term.Store(hs.GetTerm())
	j.state.Store(uint32(raft.StateFollower))
	return hs, nil
}

// startGoroutines starts the raft loop, the append goroutine, the applier
// and, when Config.Snapshots implements them, the image requester and
// the halt watcher.
func (j *Journal) startGoroutines() {
	j.wg.Go(j.run)
	j.wg.Go(j.watchSpace)
	j.wg.Go(j.appendLoop)
	j.wg.Go(j.applyLoop)
	j.wg.Go(j.advertiseVersion)
	j.wg.Go(j.probeRemoval)
	if r, ok := j.cfg.Snapshots.(ImageRequester); ok {
		j.wg.Go(func() { j.requestImages(r) })
	}
	if h, ok := j.cfg.Snapshots.(HaltSource); ok {
		j.wg.Go(func() { j.watchHalt(h) })
	}
}

// checkRestart validates the VERSION and ROLE files against the config.
func (j *Journal) checkRestart(ver map[string]string) error {
	j.setCluster(ver["cluster_id"])
	j.token = ver["token"]
	if j.cluster() == "" {
		return fmt.Errorf("journal: %s: VERSION has no cluster_id", j.cfg.Dir)
	}
	if j.cfg.ClusterID != "" && j.cfg.ClusterID != j.cluster() {
		return operr.Errorf("journal: %w: data dir belongs to cluster %s, config says %s", ErrClusterMismatch, j.cluster(), j.cfg.ClusterID)
	}
	if j.cfg.Token != "" && j.cfg.Token != j.token {
		return operr.Errorf("journal: %w: token differs from the data dir's VERSION", ErrClusterMismatch)
	}
	if err := checkNodeID(j.cfg.Dir, ver, j.id); err != nil {
		return err
	}
	roleKV, ok, err := datadir.ReadKV(j.cfg.FS, filepath.Join(j.cfg.Dir, "ROLE"))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("journal: %s: VERSION without ROLE file", j.cfg.Dir)
	}
	role, err := ParseRole(roleKV["role"])
	if err != nil {
		return operr.Errorf("journal: %s: ROLE: %w", j.cfg.Dir, err)
	}
	switch {
	case j.cfg.Role == Observer && role == Follower:
		// A voter never becomes an observer again, so a node that joined
		// as an observer and was promoted restarts with the command line
		// it joined with: the cluster's promotion outranks the flag.
		j.log.Info("configured as an observer; the data dir says follower (promoted): starting as a follower")
	case j.cfg.Role != RoleUnset && j.cfg.Role != role:
		return operr.Errorf("journal: %w: configured %s, data dir says %s", ErrRoleMismatch, j.cfg.Role, role)
	}
	j.role.Store(uint32(role))
	return nil
}

// join asks the helper to admit this node and learns the cluster id and
// members from it.
func (j *Journal) join(ctx context.Context) (*JoinResponse, error) {
	req := &JoinRequest{ID: j.id, Addr: j.cfg.Addr, Role: Role(j.role.Load()), ClusterID: j.cfg.ClusterID,
		MaxVersion: j.cfg.MaxVersion, Token: j.token}
	resp, err := j.tr.Join(ctx, j.cfg.Join, req)
	if err != nil {
		return nil, operr.Errorf("journal: join through %s: %w", j.cfg.Join, err)
	}
	if resp.ClusterVersion > j.cfg.MaxVersion {
		return nil, operr.Errorf("journal: join through %s: %w: the cluster is at format version %d and this node reads versions up to %d",
			j.cfg.Join, ErrVersion, resp.ClusterVersion, j.cfg.MaxVersion)
	}
	if j.cfg.ClusterID != "" && resp.ClusterID != j.cfg.ClusterID {
		return nil, operr.Errorf("journal: join through %s: %w: cluster is %s, config says %s",
			j.cfg.Join, ErrClusterMismatch, resp.ClusterID, j.cfg.ClusterID)
	}
	for _, m := range resp.Members {
		if m.ID == j.id && m.Role != req.Role {
			return nil, operr.Errorf("journal: join: %w: cluster has node %d as %s, config says %s", ErrRoleMismatch, j.id, m.Role, req.Role)
		}
	}
	j.setCluster(resp.ClusterID)
	return resp, nil
}

// loadState restores membership, the newest image and the dedupe window
// before raft starts. It returns the membership stored with the loaded
// image (nil: no image, or one without it).
func (j *Journal) loadState(ctx context.Context, joinResp *JoinResponse) (*membership.Membership, error) {
	m := membership.New()
	if blob, err := j.store.MembershipAt(math.MaxUint64); err != nil && !errors.Is(err, raftstore.ErrNoMembership) {
		return nil, operr.Errorf("journal: load membership: %w", err)
	} else if len(blob) > 0 {
		if m, err = membership.Decode(blob); err != nil {
			return nil, operr.Errorf("journal: stored membership: %w", err)
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
	j.learnWindow(m)
	first, err := j.store.FirstIndex()
	if err != nil {
		return nil, operr.Errorf("journal: first index: %w", err)
	}
	var imageIndex uint64
	var image *membership.Membership // the membership stored with the image
	if j.cfg.Snapshots != nil {
		idx, blob, err := j.cfg.Snapshots.LoadLatest(ctx, first-1)
		if err != nil {
			return nil, operr.Errorf("journal: load image: %w", err)
		}
		if idx > 0 {
			if idx < first-1 {
				return nil, fmt.Errorf("journal: image %d is older than the log's start %d", idx, first)
			}
			imageIndex = idx
			j.lastImage.Store(idx)
			j.images.add(idx)
			if len(blob) > 0 {
				im, err := membership.Decode(blob)
				if err != nil {
					return nil, operr.Errorf("journal: image %d: %w", idx, err)
				}
				j.learnWindow(im)
				j.applier.dedupe.Reset(im.Keys)
				image = im
				if err := j.recordWindow(idx, im, blob); err != nil {
					return nil, operr.Errorf("journal: image %d: %w", idx, err)
				}
				if len(m.Members) == 0 {
					m = im.Clone()
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
			return nil, operr.Errorf("journal: rebuild dedupe window: %w", err)
		}
		j.applier.dedupe = d
	}
	j.applied.Store(imageIndex)
	if imageIndex > 0 || j.store.HardState().GetCommit() > 0 {
		// A restart: the loaded image and the replayed log are confirmed
		// by the first comparison at a mark after the image (check.go).
		j.checker.StartPending(imageIndex)
	}
	m.Keys = nil
	if err := j.checkVersion(m, "start"); err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.mu.membership = m
	j.mu.Unlock()
	for id, addr := range addrs {
		if id != j.id && addr != "" && !m.IsRemoved(id) {
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

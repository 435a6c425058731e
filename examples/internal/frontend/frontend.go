// Package frontend wires metatree's packages into one frontend process: the
// catalog replayed from a raft journal in Pebble, images that bound the
// journal, heartbeats that watch every member, and a cancel registry that
// turns restarts and deaths into cancelled queries. Its HTTP API is the one
// in examples/API.md. The metaserver binary and the quickstart both run it;
// it is the listing a host application copies.
package frontend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/demo"
	"github.com/metatree/metatree/examples/internal/ops"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// Config is a frontend's configuration: the metaserver's flags.
type Config struct {
	ID        uint64
	Dir       string
	Addr      string // host:port peers and clients reach this frontend at
	Listen    string // host:port to bind; default Addr
	Bootstrap bool
	Join      string // helper's host:port
	Role      string // "follower" (default) or "observer"
	Token     string

	// TLSCert, TLSKey and TLSCA name the member's certificate, its key and
	// the cluster's CA (all three or none): the port then speaks only TLS,
	// and members talk mutual TLS. AuthFile names the client API tokens.
	TLSCert, TLSKey, TLSCA string
	AuthFile               string
	// Insecure lets the frontend start with none of Token, the TLS files
	// or AuthFile; without it Start refuses with secure.ErrNoCredentials.
	Insecure bool

	HeartbeatInterval  time.Duration // default 1 s
	DeadAfter          int           // missed heartbeats; default 3
	StaleAfter         time.Duration // read refusal; default 30 s
	CheckpointEntries  uint64        // default 100,000
	CheckpointInterval time.Duration // default 60 s
	CompactMargin      uint64        // entries kept behind an image; default the journal's
	PromoteMaxLag      uint64        // entries an observer may trail and be promoted; default the journal's
	ReserveBytes       int64         // free space under which writes are refused (507 no_space); default the journal's, 64 MiB; negative: no guard
	// RequestTimeout bounds a write's or a linearizable read's wait for a
	// quorum (then 503 no_leader), a client's request proxied to the leader
	// included; default 10 s.
	RequestTimeout time.Duration
	Pprof          bool // serve net/http/pprof under /debug/pprof/
	// Quota bounds the catalog (catalog.Quota; zero: none). Every member
	// must run with the same one: replicas decide each batch alike only
	// then.
	Quota catalog.Quota
	// ForceNewCluster restarts from Dir as the only voter, keeping its
	// data (after permanent quorum loss): journal.Config.ForceNewCluster.
	ForceNewCluster bool

	Logger *slog.Logger
}

// Frontend is one running frontend. Close stops it.
type Frontend struct {
	cfg    Config
	logger *slog.Logger
	epoch  heartbeat.Epoch

	tree    *catalog.Tree
	images  *image.Store
	journal *journal.Journal
	// halter is the journal once open: an image write whose fsync fails
	// (on the disk the journal shares) halts it (image.Config.OnHalt).
	halter   atomic.Pointer[journal.Journal]
	ckpt     *image.Checkpointer
	registry *cancel.Registry
	members  *heartbeat.Membership
	runs     *demo.Runs
	client   *http.Client
	// peers carries the library parts' member traffic when -listen names
	// an IP (secure.SourceTransport); nil otherwise.
	peers *http.Transport

	ln     net.Listener
	srv    *http.Server
	served chan struct{}
	ready  atomic.Bool
	// Operations: the metrics registry, the commit index at start (ready
	// once applied), draining from Shutdown on, and the API requests in
	// flight (Shutdown lets them finish).
	metrics     http.Handler
	startCommit uint64
	draining    atomic.Bool
	inflight    gate
	// Background work (checkpoints the journal asks for) runs under bgCtx
	// and bg; Close marks bgClosed (under bgMu, so no work starts after
	// it), cancels and waits.
	bgMu           sync.Mutex
	bgClosed       bool
	bg             sync.WaitGroup
	bgCtx          context.Context
	bgCancel       context.CancelFunc
	imageRequested atomic.Bool
	replays        replayGate // one resumed watch replays the log at a time
	// pruneAgain asks pruneMembers for another round (a DELETE left a
	// record behind); it holds one request at most.
	pruneAgain chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// Start opens the data dir, joins or restarts the cluster, and serves the
// API on cfg.Addr until Close.
func Start(ctx context.Context, cfg Config) (_ *Frontend, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.RequestTimeout == 0:
		cfg.RequestTimeout = DefaultRequestTimeout
	case cfg.RequestTimeout < 0:
		return nil, fmt.Errorf("request timeout %v: want a positive duration", cfg.RequestTimeout)
	}
	hasCredential := cfg.Token != "" || cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.TLSCA != "" || cfg.AuthFile != ""
	if err := secure.RequireCredentials(hasCredential, cfg.Insecure, "-token, -tls-cert/-tls-key/-tls-ca or -auth-file"); err != nil {
		return nil, err
	}
	role := journal.RoleUnset
	switch cfg.Role {
	case "":
	case "follower":
		role = journal.Follower
	case "observer":
		role = journal.Observer
	default:
		return nil, fmt.Errorf("role %q: want follower or observer", cfg.Role)
	}
	sec, err := loadSecurity(cfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	// With -listen on a specific IP, every connection to another member
	// leaves from it (secure.SourceDialer).
	dial := secure.SourceDialer(cfg.Listen)
	f := &Frontend{
		cfg:        cfg,
		logger:     cfg.Logger,
		epoch:      heartbeat.NewEpoch(),
		tree:       newTree(cfg.Quota),
		registry:   cancel.New(cancel.Config{Logger: cfg.Logger}),
		runs:       demo.NewRuns(),
		client:     secure.MemberClient(sec.files, cfg.Token, cfg.RequestTimeout+time.Second, dial),
		peers:      secure.SourceTransport(dial, sec.files),
		served:     make(chan struct{}),
		pruneAgain: make(chan struct{}, 1),
	}
	var peerClient *http.Client // nil: each part's default client
	if f.peers != nil {
		peerClient = &http.Client{Transport: f.peers}
	}
	f.bgCtx, f.bgCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			f.Close()
		}
	}()

	// Serve first: peers reach the journal and the images through this
	// server while it joins. Requests before the parts are ready get 503.
	listen := cmp.Or(cfg.Listen, cfg.Addr)
	f.ln, err = net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", listen, err)
	}
	f.ln = secure.Listen(f.ln, sec.files)
	f.srv = &http.Server{Handler: secure.Authorize(sec.tokens, cfg.Token, f.routes()), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(f.ln)
	}()

	f.images, err = image.Open(image.Config{Dir: cfg.Dir, State: f.tree, Token: cfg.Token, TLS: secure.ClientTLS(sec.files), HTTPClient: peerClient, Logger: cfg.Logger,
		OnHalt: func(err error) {
			if j := f.halter.Load(); j != nil {
				j.Halt(err)
			}
		}})
	if err != nil {
		return nil, err
	}
	f.journal, err = journal.Open(ctx, journal.Config{
		ID: cfg.ID, Dir: cfg.Dir, Addr: cfg.Addr,
		Bootstrap: cfg.Bootstrap, Join: cfg.Join, Role: role, Token: cfg.Token, TLS: secure.ClientTLS(sec.files), HTTPClient: peerClient,
		ForceNewCluster: cfg.ForceNewCluster,
		StateMachine:    f.tree, Snapshots: snapshots{f.images, f},
		StaleAfter: cfg.StaleAfter, CompactMargin: cfg.CompactMargin, PromoteMaxLag: cfg.PromoteMaxLag,
		ReserveBytes: cfg.ReserveBytes,
		// Idempotency keys are remembered no further back than the log
		// is kept.
		DedupeWindow: min(cfg.CompactMargin, 10_000),
		// The node advertises the formats its catalog reads.
		MaxVersion: maxVersion(f.tree.MaxFormat()),
		Logger:     cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	f.halter.Store(f.journal)
	if err := f.images.Halted(); err != nil {
		f.journal.Halt(err) // an image write failed while the journal opened
	}
	if err := f.images.SetClusterID(f.journal.Status().ClusterID); err != nil {
		return nil, err
	}
	f.startCommit = f.journal.Status().Committed
	f.ckpt, err = image.NewCheckpointer(image.CheckpointerConfig{
		Store: f.images, Journal: f.journal,
		Applied:   func() uint64 { return f.journal.Status().Applied },
		NewState:  func() image.State { return newTree(cfg.Quota) },
		Threshold: cfg.CheckpointEntries, Interval: cfg.CheckpointInterval,
		// The leader need not pay for the shadow copy: followers and
		// observers checkpoint on their own schedule, and the leader adopts
		// their images (served under /image/ on the same address as raft)
		// so that its log is compacted too.
		Enabled: func() bool { return !f.journal.Status().IsLeader() },
		Peers:   f.peerAddrs,
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	f.members, err = heartbeat.New(heartbeat.Config{
		ID: cfg.ID, Epoch: f.epoch, Cluster: f.journal.Status().ClusterID, Token: cfg.Token, TLS: secure.ClientTLS(sec.files), Client: peerClient,
		Tree: f.tree, Journal: proposer{f.journal},
		Interval: cfg.HeartbeatInterval, DeadAfter: cfg.DeadAfter,
		OnEvent: func(ev heartbeat.Event) { f.registry.Apply(ev) },
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	reg, err := ops.NewRegistry(f.journal.Collector(), f.tree.Collector(), f.images.Collector(),
		f.ckpt.Collector(), f.members.Collector(), f.registry.Collector())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	f.metrics = ops.MetricsHandler(reg)
	f.ready.Store(true)
	f.bg.Go(f.pruneMembers)
	if err := f.registerSelf(ctx); err != nil {
		return nil, err
	}
	f.logger.Info("frontend started", "id", cfg.ID, "addr", f.ln.Addr().String(), "epoch", f.epoch.String(), "cluster", f.journal.Status().ClusterID)
	return f, nil
}

// peerAddrs returns the addresses of the other frontends (raft members,
// followers and observers alike), which serve their images.
func (f *Frontend) peerAddrs() []string {
	var addrs []string
	for _, m := range f.journal.Status().Members {
		if m.ID != f.cfg.ID && m.Addr != "" {
			addrs = append(addrs, m.Addr)
		}
	}
	return addrs
}

// snapshots is the journal's image hook: the image store, plus a
// checkpoint on demand when raft must send a follower an image and the
// newest one predates that follower's membership.
type snapshots struct {
	*image.Store
	f *Frontend
}

// RequestImage implements journal.ImageRequester. It must not block: the
// checkpoint runs on a goroutine that Close waits for, one at a time.
func (s snapshots) RequestImage() {
	f := s.f
	if f.ckpt == nil || !f.imageRequested.CompareAndSwap(false, true) {
		return
	}
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	if f.bgClosed {
		f.imageRequested.Store(false)
		return
	}
	f.bg.Go(func() {
		defer f.imageRequested.Store(false)
		ctx, cancel := context.WithTimeout(f.bgCtx, time.Minute)
		defer cancel()
		if _, err := f.ckpt.Checkpoint(ctx); err != nil {
			f.logger.Warn("checkpoint requested by the journal failed", "err", err)
		}
	})
}

// proposer adapts *journal.Journal to heartbeat.Journal.
type proposer struct{ j *journal.Journal }

func (p proposer) Propose(ctx context.Context, data []byte) (uint64, any, error) {
	return p.j.Propose(ctx, data)
}

func (p proposer) LeaderTerm() (uint64, bool) {
	st := p.j.Status()
	return st.Term, st.IsLeader()
}

// registerSelf records this frontend in the member list (once: a restart
// finds its record and only answers heartbeats with its new epoch). A
// record at another address is an old cluster's (the catalog came from a
// restored image): it is replaced.
func (f *Frontend) registerSelf(ctx context.Context) error {
	if m, ok := f.members.Member(f.cfg.ID); ok {
		if m.Addr == f.cfg.Addr {
			return nil
		}
		if err := f.members.Remove(ctx, f.cfg.ID); err != nil && !errors.Is(err, heartbeat.ErrNotFound) {
			return fmt.Errorf("replace frontend %d's record at %s: %w", f.cfg.ID, m.Addr, err)
		}
	}
	role := f.cfg.Role
	if role == "" {
		role = "follower"
	}
	ctx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	for {
		err := f.members.Add(ctx, heartbeat.Member{ID: f.cfg.ID, Addr: f.cfg.Addr, Kind: heartbeat.KindFrontend, Role: role})
		if err == nil || errors.Is(err, heartbeat.ErrExists) {
			return nil
		}
		f.logger.Debug("registering as a member", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("register frontend %d as a member: %w", f.cfg.ID, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Addr is the address the frontend serves on.
func (f *Frontend) Addr() string { return f.ln.Addr().String() }

// Journal, Tree, Members and Registry give the embedded parts to programs
// such as the quickstart that drive a frontend in-process.
func (f *Frontend) Journal() *journal.Journal         { return f.journal }
func (f *Frontend) Tree() *catalog.Tree               { return f.tree }
func (f *Frontend) Members() *heartbeat.Membership    { return f.members }
func (f *Frontend) Registry() *cancel.Registry        { return f.registry }
func (f *Frontend) Epoch() heartbeat.Epoch            { return f.epoch }
func (f *Frontend) Checkpointer() *image.Checkpointer { return f.ckpt }

// Shutdown is the graceful stop a host runs on SIGTERM: /readyz fails
// from now on (a load balancer stops sending), a leader hands leadership to
// the most caught-up voter (journal.Handoff), the API requests in flight
// finish (writes made meanwhile are forwarded to the new leader), all
// bounded by ctx; then Close.
func (f *Frontend) Shutdown(ctx context.Context) error {
	f.draining.Store(true)
	if f.journal != nil {
		if err := f.journal.Handoff(ctx); err != nil {
			f.logger.Warn("leadership hand-off failed; closing anyway", "err", err)
		}
	}
	if err := f.inflight.wait(ctx); err != nil {
		f.logger.Warn("API requests still in flight at shutdown", "err", err)
	}
	return f.Close()
}

// Close stops serving and closes the parts in the reverse order of Start.
// It is idempotent.
func (f *Frontend) Close() error {
	f.closeOnce.Do(func() {
		f.ready.Store(false) // new API requests get 503 from here on
		var errs []error
		f.runs.Close()
		f.bgMu.Lock()
		f.bgClosed = true
		f.bgMu.Unlock()
		f.bgCancel()
		f.bg.Wait()
		// The library's parts first: closing the journal ends the peers'
		// long-lived raft streams, which the HTTP server would otherwise
		// wait for.
		if f.members != nil {
			errs = append(errs, f.members.Close())
		}
		if f.ckpt != nil {
			errs = append(errs, f.ckpt.Close())
		}
		if f.journal != nil {
			errs = append(errs, f.journal.Close())
		}
		if f.images != nil {
			errs = append(errs, f.images.Close())
		}
		errs = append(errs, f.registry.Close())
		if f.peers != nil {
			f.peers.CloseIdleConnections()
		}
		f.client.CloseIdleConnections()
		if f.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := f.srv.Shutdown(ctx); err != nil {
				f.srv.Close() // a peer's stream outlived the journal: cut it
			}
			cancel()
			<-f.served
		}
		f.closeErr = errors.Join(errs...)
	})
	return f.closeErr
}

// newTree returns an empty catalog under quota q. The live tree and every
// copy replayed from the journal (shadow checkpoints, historical watches)
// carry the same quota, or they would decide batches differently.
func newTree(q catalog.Quota) *catalog.Tree {
	t := catalog.New()
	t.SetQuota(q)
	return t
}

// maxVersion is the newest format version a node whose catalog reads batch
// formats up to catalogMax reads: that version, or, when the catalog reads
// the newest batch format, the journal's newest, since the versions above
// it add journal entries (version 3: the consistency checks) and no batch
// format.
func maxVersion(catalogMax int) uint32 {
	if catalogMax >= catalog.NewestBatchVersion {
		return journal.NewestVersion
	}
	return min(journal.NewestVersion, uint32(catalogMax))
}

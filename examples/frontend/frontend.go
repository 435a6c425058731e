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

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// DefaultRequestTimeout is Config.RequestTimeout when it is 0.
const DefaultRequestTimeout = 10 * time.Second

// Config is a frontend's configuration. The zero value of every tunable
// takes the default its comment names; [Config.WithDefaults] shows the
// effective values.
type Config struct {
	// ID is this frontend's raft and member id: non-zero, never reused in
	// the cluster.
	ID uint64
	// Dir is the data dir: VERSION, ROLE, journal/, image/.
	Dir string
	// Addr is the host:port peers and clients reach this frontend at.
	Addr string
	// Listen is the host:port to bind; default Addr. A specific IP is also
	// the source of every connection to another member.
	Listen string
	// Bootstrap starts a new cluster with this frontend as its only voter.
	// Join names any running member (host:port) to join through instead.
	// With neither, the frontend restarts from Dir.
	Bootstrap bool
	Join      string
	// Role is journal.Follower (a voter; the default) or journal.Observer
	// (a learner) when joining. On a restart the data dir's role holds: a
	// Role that disagrees fails Start (journal.ErrRoleMismatch), except
	// Observer on a member promoted since, which starts as the voter it
	// is (journal.Config.Role).
	Role journal.Role
	// Token is the cluster's join token: joins, images, forwarded writes
	// and heartbeats carry it.
	Token string
	// TLSCert, TLSKey and TLSCA name this member's certificate (with the
	// URI SAN of [MemberURI]), its key and the cluster's CA, all three or
	// none. The port then speaks only TLS, members talk mutual TLS and
	// every member endpoint checks that the certificate names the sender.
	// The files are re-read when they change ([LoadCertificates]).
	TLSCert, TLSKey, TLSCA string
	// Insecure lets the frontend start with neither Token nor the TLS
	// files; without it Start refuses with ErrNoCredentials, since anyone
	// who reaches the port could then send heartbeats (which cancel
	// queries) or join.
	Insecure bool

	// Handler is the host's own API, served on the same port for every
	// path the member endpoints (/raft/, /image/, /_heartbeat) do not
	// take; nil answers 404. Shutdown lets its requests in flight finish.
	Handler http.Handler
	// Middleware, when set, wraps everything the port serves, the member
	// endpoints included (client authentication that must see every
	// request, for example).
	Middleware func(http.Handler) http.Handler
	// OnClose, when set, runs at the start of Close, before any part
	// closes: the host ends its own work that uses them (long-lived
	// streams, background jobs).
	OnClose func()

	HeartbeatInterval  time.Duration // how often the leader heartbeats every member; default 1 s
	DeadAfter          int           // missed heartbeats in a row before a member is dead; default 3
	StaleAfter         time.Duration // a non-leader this far behind the leader's clock refuses reads; default 30 s
	CheckpointEntries  uint64        // entries after the newest image that trigger a checkpoint; default 100,000
	CheckpointInterval time.Duration // how often that threshold is checked; default 60 s
	CompactMargin      uint64        // entries kept behind an image for slow followers; default the journal's
	PromoteMaxLag      uint64        // entries an observer may trail and still be promoted; default the journal's
	ReserveBytes       int64         // free space under which writes are refused (journal.ErrNoSpace); default the journal's, 64 MiB; negative: no guard
	// RequestTimeout bounds a write's ([Frontend.Write]), a member
	// change's and a heartbeat transition's wait for a quorum
	// (heartbeat.Config.ProposeTimeout); default 10 s
	// (DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Quota bounds the catalog (catalog.Quota; zero: none). Every member
	// must run with the same one: replicas decide each batch alike only
	// then. Start exempts the cluster's own records (Exempt is
	// heartbeat.ClusterPath) once the cluster's format version is 6, so
	// that members join, restart and die in a full catalog; below it
	// (a rolling upgrade from a release without the exemption) they count
	// against the quota as on the older members.
	Quota catalog.Quota
	// ForceNewCluster restarts from Dir as the only voter, keeping its
	// data (after permanent quorum loss): journal.Config.ForceNewCluster.
	ForceNewCluster bool

	// Listener, when set, is the bound port to serve (Listen is then
	// unused), and Dial, when set, dials every connection to another
	// member: together they run the frontend on an in-memory network
	// (frontendtest). Close closes the Listener.
	Listener net.Listener
	Dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	// FS, when set, is the filesystem that holds Dir (the journal's Pebble
	// store, its VERSION, ROLE and MEMBERS files, and the images), for
	// tests and simulators: an in-memory one that loses what was not
	// synced when a test cuts its power (journaltest.CrashFS). Default:
	// the OS (vfs.Default).
	FS vfs.FS
	// Clock, when set, is the time source of every part (the journal's
	// ticks and staleness guard, the heartbeats, the checkpointer), for
	// tests and simulators that skew a member's wall clock; default the
	// real clock.
	Clock journal.Clock

	// Logger receives every part's log; nil discards it.
	Logger *slog.Logger
}

// Frontend is one running frontend: the catalog replayed from a raft
// journal in Pebble, images that bound the journal, heartbeats that watch
// every member, and a cancel registry that turns restarts and deaths into
// cancelled queries, served on one port. Its methods are safe for
// concurrent use. Close (or Shutdown) stops it.
type Frontend struct {
	cfg    Config
	logger *slog.Logger
	epoch  epoch.Epoch // at start; Epoch is the current one

	tree     *catalog.Tree
	images   *image.Store
	journal  *journal.Journal
	ckpt     *image.Checkpointer
	registry *cancel.Registry
	members  *heartbeat.Membership
	client   *http.Client
	// peers carries the library parts' member traffic when Listen names
	// an IP (secure.SourceTransport); nil otherwise.
	peers *http.Transport

	ln     net.Listener
	srv    *http.Server
	served chan struct{}
	// ready is set once Start has wired every part: the member endpoints
	// answer 503 before. draining is set from Shutdown on; startCommit is
	// the commit index at start (Ready once applied); inflight counts the
	// host handler's requests (Shutdown lets them finish).
	ready       atomic.Bool
	draining    atomic.Bool
	startCommit uint64
	inflight    gate
	// Background work (pruning member records) runs under bgCtx and bg;
	// Close cancels and waits.
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
	// pruneAgain asks pruneMembers for another round (a removal left a
	// record behind); it holds one request at most.
	pruneAgain chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// Start opens the data dir, serves the port, joins or restarts the
// cluster, registers this frontend as a heartbeat member, and returns once
// every part runs. ctx bounds the start (a join waits for the helper).
func Start(ctx context.Context, cfg Config) (_ *Frontend, err error) {
	cfg = cfg.WithDefaults()
	if cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("%w: request timeout %v: want a positive duration", ErrInvalidConfig, cfg.RequestTimeout)
	}
	if cfg.ID == 0 || cfg.Dir == "" || cfg.Addr == "" {
		return nil, fmt.Errorf("%w: ID (non-zero), Dir and Addr are required", ErrInvalidConfig)
	}
	if cfg.Token == "" && cfg.TLSCert == "" && cfg.TLSKey == "" && cfg.TLSCA == "" && !cfg.Insecure {
		return nil, fmt.Errorf("%w: give Token or TLSCert/TLSKey/TLSCA, or set Insecure to run without any (anyone who reaches the port can then join, and send heartbeats that cancel queries)", ErrNoCredentials)
	}
	if cfg.Role != journal.RoleUnset && cfg.Role != journal.Follower && cfg.Role != journal.Observer {
		return nil, fmt.Errorf("%w: role %v: want follower or observer", ErrInvalidConfig, cfg.Role)
	}
	certs, err := loadTLS(cfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	// With Listen on a specific IP, every connection to another member
	// leaves from it (secure.SourceDialer).
	dial := secure.DialFunc(cfg.Dial)
	if d := secure.SourceDialer(cfg.Listen); d != nil && dial == nil {
		dial = d.DialContext
	}
	f := &Frontend{
		cfg:        cfg,
		logger:     cfg.Logger,
		epoch:      epoch.New(),
		tree:       newTree(cfg.Quota),
		registry:   cancel.New(cancel.Config{Logger: cfg.Logger}),
		client:     secure.MemberClient(certs, cfg.Token, cfg.RequestTimeout+time.Second, dial),
		peers:      secure.SourceTransport(dial, certs),
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

	// Serve before the journal opens: peers reach the journal and the
	// images through this port while this frontend joins, and a raft
	// stream that finds no answer would stall the join. Member requests
	// before the parts are ready get 503 at once.
	listen := cmp.Or(cfg.Listen, cfg.Addr)
	if f.ln = cfg.Listener; f.ln == nil {
		f.ln, err = net.Listen("tcp", listen)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", listen, err)
	}
	f.ln = secure.Listen(f.ln, certs)
	var h http.Handler = f.routes()
	if cfg.Middleware != nil {
		h = cfg.Middleware(h)
	}
	f.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(f.ln)
	}()

	// The journal watches the image store (journal.HaltSource): a failed
	// image fsync, on the disk they share, halts the journal too.
	f.images, err = image.Open(image.Config{Dir: cfg.Dir, FS: cfg.FS, State: f.tree, Token: cfg.Token, TLS: secure.ClientTLS(certs), HTTPClient: peerClient, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	f.journal, err = journal.Open(ctx, journal.Config{
		ID: cfg.ID, Dir: cfg.Dir, FS: cfg.FS, Addr: cfg.Addr,
		Bootstrap: cfg.Bootstrap, Join: cfg.Join, Role: cfg.Role, Token: cfg.Token, TLS: secure.ClientTLS(certs), HTTPClient: peerClient,
		ForceNewCluster: cfg.ForceNewCluster,
		StateMachine:    f.tree, Snapshots: f.images,
		// User writes under the cluster's own records are refused
		// whichever way they are proposed.
		ProposalGuard: guardReserved,
		StaleAfter:    cfg.StaleAfter, CompactMargin: cfg.CompactMargin, PromoteMaxLag: cfg.PromoteMaxLag,
		ReserveBytes: cfg.ReserveBytes,
		// Idempotency keys are remembered no further back than the log
		// is kept. A bootstrap records this window for the cluster; every
		// other member uses the cluster's (and keeps at least that much
		// log whatever its CompactMargin).
		DedupeWindow: min(cfg.CompactMargin, 10_000),
		// The node advertises the formats its catalog reads.
		MaxVersion: maxVersion(f.tree.MaxFormat()),
		Clock:      cfg.Clock,
		Logger:     cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := f.images.SetClusterID(f.journal.Status().ClusterID); err != nil {
		return nil, err
	}
	f.startCommit = f.journal.Status().Committed
	f.ckpt, err = image.NewCheckpointer(image.CheckpointerConfig{
		Store: f.images, Journal: journal.ImageLogOf(f.journal),
		Applied:   func() uint64 { return f.journal.Status().Applied },
		NewState:  func() image.State { return newTree(cfg.Quota) },
		Threshold: cfg.CheckpointEntries, Interval: cfg.CheckpointInterval,
		// The leader need not pay for the shadow copy: followers and
		// observers checkpoint on their own schedule, and the leader adopts
		// their images (served under /image/ on the same address as raft)
		// so that its log is compacted too.
		Enabled: func() bool { return !f.journal.Status().IsLeader() },
		Peers:   f.peerAddrs,
		Clock:   cfg.Clock,
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	// The member records are read once the entries this frontend had
	// committed are replayed (from the local log, no quorum needed): a
	// restart then finds its own record, and needs no write to register
	// while the cluster has no quorum. A halted applier ends the wait; the
	// records are then read as far as it got.
	replayCtx, cancelReplay := context.WithTimeout(ctx, 30*time.Second)
	if err := f.journal.WaitApplied(replayCtx, f.startCommit); err != nil {
		f.logger.Warn("reading the member records before the replay reached the commit index at start", "err", err)
	}
	cancelReplay()
	f.members, err = heartbeat.New(heartbeat.Config{
		ID: cfg.ID, Epoch: f.epoch, Cluster: f.journal.Status().ClusterID, Token: cfg.Token, TLS: secure.ClientTLS(certs), Client: peerClient,
		Replaced: func() []string { return f.journal.Status().Replaced },
		Tree:     f.tree, Journal: f.journal,
		// The member records are written in the cluster's batch format:
		// from version 6 on they pass a full catalog's quota (newTree),
		// and before it every member, of either release, refuses them
		// alike.
		BatchVersion: func() int { return BatchVersion(f.journal.ClusterVersion()) },
		Interval:     cfg.HeartbeatInterval, DeadAfter: cfg.DeadAfter,
		// The monitor's claim and transitions wait for their commit as
		// long as a write does: on a disk whose fsyncs outlast a
		// heartbeat interval they commit all the same.
		ProposeTimeout: cfg.RequestTimeout,
		OnEvent:        func(ev epoch.Event) { f.registry.Apply(ev) },
		Clock:          cfg.Clock,
		Logger:         cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	f.ready.Store(true)
	f.bg.Go(f.pruneMembers)
	if err := f.registerSelf(ctx); err != nil {
		return nil, err
	}
	f.logger.Info("frontend started", "id", cfg.ID, "addr", f.ln.Addr().String(), "epoch", f.epoch.String(), "cluster", f.journal.Status().ClusterID)
	return f, nil
}

// routes mounts the member endpoints (raft messages and forwarded
// proposals, images, heartbeats) and the host's handler.
func (f *Frontend) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/raft/", f.whenReady(func() http.Handler { return f.journal.Handler() }))
	mux.Handle(image.PathPrefix, f.whenReady(func() http.Handler { return f.images.Handler() }))
	mux.Handle(responder.Path, f.whenReady(func() http.Handler { return f.members.Handler() }))
	host := f.cfg.Handler
	if host == nil {
		host = httpjson.NotFound
	}
	mux.Handle("/", f.counted(host))
	return mux
}

// whenReady serves h once Start has wired every part, and 503 before and
// from Close on.
func (f *Frontend) whenReady(h func() http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.ready.Load() {
			// Close the connection rather than drain the body: a peer's
			// raft stream is an endless request body, and the server would
			// otherwise read it before it sends this answer.
			w.Header().Set("Connection", "close")
			httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "starting", "frontend %d is starting or stopping", f.cfg.ID))
			return
		}
		h().ServeHTTP(w, r)
	})
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

// registerSelf records this frontend in the member list (once: a restart
// finds its record and only answers heartbeats with its new epoch). A
// record at another address is an old cluster's (the catalog came from a
// restored image): it is replaced. Without a record, workers refuse this
// frontend's fragments (heartbeat.ErrUnknownNode).
func (f *Frontend) registerSelf(ctx context.Context) error {
	ctx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	if m, ok := f.members.Member(f.cfg.ID); ok {
		if m.Addr == f.cfg.Addr {
			return nil
		}
		if err := f.members.Remove(ctx, f.cfg.ID); err != nil && !errors.Is(err, heartbeat.ErrNotFound) {
			return fmt.Errorf("replace frontend %d's record at %s: %w", f.cfg.ID, m.Addr, err)
		}
	}
	role := f.journal.Status().Role // the data dir's on a restart, which a promotion changes
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		err := f.members.Add(ctx, heartbeat.Member{ID: f.cfg.ID, Addr: f.cfg.Addr, Kind: epoch.KindFrontend, Role: role.String()})
		if err == nil || errors.Is(err, heartbeat.ErrExists) {
			return nil
		}
		f.logger.Debug("registering as a member", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("register frontend %d as a member: %w", f.cfg.ID, err)
		case <-retry.C:
		}
	}
}

// ID is this frontend's member id.
func (f *Frontend) ID() uint64 { return f.cfg.ID }

// Addr is the address the frontend serves on (the bound one: with a
// Listen or Addr of port 0, the port the system chose).
func (f *Frontend) Addr() string { return f.ln.Addr().String() }

// Journal is the raft journal: status, linearizable reads
// ([journal.Journal.ReadBarrier]), raw proposals, membership changes.
func (f *Frontend) Journal() *journal.Journal { return f.journal }

// Tree is the replicated catalog: read it, watch it; write it through
// [Frontend.Write].
func (f *Frontend) Tree() *catalog.Tree { return f.tree }

// Members is heartbeat's membership: the frontends and workers, their
// epochs and statuses.
func (f *Frontend) Members() *heartbeat.Membership { return f.members }

// Registry is the cancel registry: a query registered in it is cancelled
// when its coordinator or one of its workers restarts or dies.
func (f *Frontend) Registry() *cancel.Registry { return f.registry }

// CanCoordinate is nil while this frontend may coordinate a new query, and
// wraps journal.ErrRemoved once it is removed: no entry reaches it then,
// so it would never learn of a worker's restart or death, which is what
// cancels its queries.
func (f *Frontend) CanCoordinate() error {
	if f.journal.Status().Removed {
		return fmt.Errorf("%w: a removed frontend coordinates no query", journal.ErrRemoved)
	}
	return nil
}

// Epoch is this frontend's current epoch: a query it coordinates registers
// with cancel.Member{Node: f.ID(), Epoch: f.Epoch()}. It is the epoch the
// process drew at start until the log records its end (this frontend was
// declared dead while cut off); the process then draws a fresh one
// (heartbeat.Membership.Epoch), so read it for every query, fence or
// owner, never once.
func (f *Frontend) Epoch() epoch.Epoch {
	if f.members == nil {
		return f.epoch
	}
	return f.members.Epoch()
}

// Checkpointer writes images on its schedule or on demand.
func (f *Frontend) Checkpointer() *image.Checkpointer { return f.ckpt }

// Images is the image store of the data dir.
func (f *Frontend) Images() *image.Store { return f.images }

// Client is the HTTP client for the host's own traffic to other members
// (to its workers, say): mutual TLS with this member's certificate when
// the TLS files are set (an http:// URL is sent as https://), the
// cluster's token on every request, from the Listen IP when it names one.
func (f *Frontend) Client() *http.Client { return f.client }

// Collectors are the Prometheus collectors of every part: the journal,
// the catalog, the images, the checkpointer, heartbeats and the cancel
// registry. Register them with a registry of the host's.
func (f *Frontend) Collectors() []prometheus.Collector {
	return []prometheus.Collector{f.journal.Collector(), f.tree.Collector(), f.images.Collector(),
		f.ckpt.Collector(), f.members.Collector(), f.registry.Collector()}
}

// NewTree returns an empty catalog under the frontend's quota, as the
// live tree is: a copy that replays the journal (a shadow checkpoint, a
// resumed watch) must decide every batch as the live one did.
func (f *Frontend) NewTree() *catalog.Tree { return newTree(f.cfg.Quota) }

// Shutdown is the graceful stop a host runs on SIGTERM: Ready fails from
// now on (a load balancer stops sending), a leader hands leadership to
// the most caught-up voter (journal.Handoff), the host handler's requests
// in flight finish (writes made meanwhile are forwarded to the new
// leader), all bounded by ctx; then Close.
func (f *Frontend) Shutdown(ctx context.Context) error {
	f.draining.Store(true)
	if f.journal != nil {
		if err := f.journal.Handoff(ctx); err != nil {
			f.logger.Warn("leadership hand-off failed; closing anyway", "err", err)
		}
	}
	if err := f.inflight.wait(ctx); err != nil {
		f.logger.Warn("requests still in flight at shutdown", "err", err)
	}
	return f.Close()
}

// Close stops serving and closes the parts in the reverse order of Start,
// and returns once every goroutine the frontend started has exited. It is
// idempotent. It does not hand leadership off: Shutdown does.
func (f *Frontend) Close() error {
	f.closeOnce.Do(func() {
		f.ready.Store(false) // member requests get 503 from here on
		if f.cfg.OnClose != nil {
			f.cfg.OnClose()
		}
		var errs []error
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

// newTree returns an empty catalog under quota q, the cluster's own
// records (heartbeat.ClusterPath) exempt in batches of format 4 (cluster
// version 6 on, see BatchVersion): members join, restart and die whatever
// the users wrote. The live tree and every copy replayed from the
// journal (shadow checkpoints, historical watches) carry the same quota,
// or they would decide batches differently.
func newTree(q catalog.Quota) *catalog.Tree {
	t := catalog.New()
	if q != (catalog.Quota{}) {
		q.Exempt = heartbeat.ClusterPath
	}
	t.SetQuota(q)
	return t
}

// maxVersion is the newest format version a node whose catalog reads batch
// formats up to catalogMax reads: the newest version whose batches it
// reads (see BatchVersion).
func maxVersion(catalogMax int) uint32 {
	for v := uint32(journal.NewestVersion); v > journal.OldestVersion; v-- {
		if BatchVersion(v) <= catalogMax {
			return v
		}
	}
	return journal.OldestVersion
}

// BatchVersion is the newest catalog batch format a cluster at format
// version clusterVersion reads (journal.Status.ClusterVersion): versions 1
// and 2 carry the batch formats 1 and 2, version 3 adds only journal
// entries (the consistency checks), version 4 carries batch format 3
// (catalog.Op.Owner), version 5 adds only the checks' digest format 2
// (catalog.DigestV2), version 6 carries batch format 4 (the quota's
// exemption of the cluster's records, catalog.Quota.Exempt). Writers
// encode with catalog.Batch.EncodeVersion(BatchVersion(cv)).
func BatchVersion(clusterVersion uint32) int {
	switch {
	case clusterVersion >= 6:
		return catalog.BatchV4
	case clusterVersion >= 4:
		return catalog.BatchV3
	case clusterVersion >= 2:
		return catalog.BatchV2
	}
	return catalog.BatchV1
}

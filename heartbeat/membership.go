package heartbeat

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/internal/operr"
)

// Journal is what heartbeat needs of the journal: proposing a catalog batch
// and knowing whether this node leads, in which term. *journal.Journal
// satisfies it as is; tests use a fake.
type Journal interface {
	// Propose replicates data (an encoded catalog.Batch) and returns once it
	// is applied on this node, with the catalog's *catalog.Result as value.
	Propose(ctx context.Context, data []byte) (index uint64, value any, err error)
	// LeaderTerm returns the raft term this node knows and whether it is
	// the leader in it.
	LeaderTerm() (term uint64, leader bool)
}

// Config configures a Membership. Zero tunables take their defaults.
type Config struct {
	// ID is this frontend's member id (its record need not exist yet).
	ID uint64
	// Epoch is this process's epoch at start: epoch.New() once per process
	// start. Membership.Epoch is the current one.
	Epoch epoch.Epoch
	// Cluster is the cluster id sent in heartbeats; members configured with
	// another refuse them. Optional.
	Cluster string
	// Replaced, when set, returns the clusters this one replaced (a
	// restore's: journal.Status.Replaced), read for every round and sent
	// in its heartbeats: a member that follows one of them moves to this
	// cluster at once and refuses the replaced one's heartbeats for good
	// (responder). Default: none.
	Replaced func() []string
	// Tree is the catalog this frontend replays into. Required.
	Tree *catalog.Tree
	// Journal proposes transitions and tells leadership. Required.
	Journal Journal
	// BatchVersion, when set, returns the catalog batch format version in
	// which to encode the member records' batches, read before each one:
	// the newest that every member reads (with a journal, the batch format
	// its cluster version allows). From catalog.BatchV4 on, a catalog
	// quota whose Exempt is ClusterPath lets those batches through a full
	// catalog; an older version is judged as the releases without the
	// exemption judge it, on every replica alike. Default (nil): the
	// oldest format that carries each batch (catalog.Batch.Encode), which
	// a full catalog refuses like any user's batch.
	BatchVersion func() int
	// Token is the cluster's token: sent with every heartbeat (members
	// started with it refuse heartbeats without it) and required of the
	// heartbeats this frontend answers. Default: none.
	Token string
	// TLS, when set, is the client side of mutual TLS: the default Client
	// dials members with it, the default Endpoint is https, and this
	// frontend's responder requires a verified certificate naming the
	// leader (responder.Config.PeerCerts). Default: none.
	TLS *tls.Config
	// Client sends heartbeats. Default: a client with keep-alive
	// connections, no overall timeout (each request has Timeout).
	Client *http.Client
	// Endpoint maps a member to its heartbeat URL. Default:
	// "http://" + Addr + Path ("https://" with TLS).
	Endpoint func(Member) string
	// Interval between heartbeat rounds. Default 1 s.
	Interval time.Duration
	// Timeout of one heartbeat request. Default Interval/2; at most Interval.
	Timeout time.Duration
	// ProposeTimeout is how long the leader's claim of the monitor and
	// each transition it journals wait for their commit before the next
	// round decides again. It must outlast a commit on the slowest disk
	// the cluster runs on (a sole voter's fsync): a shorter one gives up
	// on every claim there, and the monitor never runs. Default 10 ×
	// Interval.
	ProposeTimeout time.Duration
	// DeadAfter is how many heartbeats in a row a member must miss, over at
	// least DeadAfter intervals, to be declared dead. Default 3.
	DeadAfter int
	// Grace is how long a newly elected leader waits before declaring
	// anyone dead, so failover causes no false deaths. Default
	// DeadAfter × Interval.
	Grace time.Duration
	// OnEvent receives every membership transition, in log order, one call
	// at a time, from the goroutine replaying the member records (and, for
	// the members present at start, from New). It must be quick:
	// cancel.Registry.Apply is. Nil: none.
	OnEvent func(epoch.Event)
	// SlowRound is the heartbeat round (every member probed in parallel)
	// past which the leader logs a warning with the figure, at most once
	// every 10s. Default: Timeout.
	SlowRound time.Duration
	// Version is the software version this frontend reports in its own
	// heartbeat answers. Default: DefaultVersion().
	Version string
	// Clock is the time source. Default: the real clock.
	Clock Clock
	// Logger. Default: discard.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c in which every zero tunable holds its
// default: the configuration New runs with. Required fields (ID, Epoch,
// Tree, Journal) stay as they are; nothing is validated. It is the one
// place the defaults live.
func (c Config) WithDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = c.Interval / 2
	}
	if c.ProposeTimeout <= 0 {
		c.ProposeTimeout = 10 * c.Interval
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 3
	}
	if c.Grace <= 0 {
		c.Grace = time.Duration(c.DeadAfter) * c.Interval
	}
	if c.SlowRound <= 0 {
		c.SlowRound = c.Timeout
	}
	if c.Version == "" {
		c.Version = responder.DefaultVersion()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// One kept-alive connection per member, however many members:
		// the default cap of 100 idle connections would make every round
		// redial most of a large cluster.
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = 2
		tr.TLSClientConfig = c.TLS
		c.Client = &http.Client{Transport: tr}
	}
	if c.Endpoint == nil {
		scheme := "http://"
		if c.TLS != nil {
			scheme = "https://"
		}
		c.Endpoint = func(m Member) string { return scheme + m.Addr + responder.Path }
	}
	return c
}

// fill validates c and fills its defaults.
func (c *Config) fill() error {
	if c.ID == 0 {
		return fmt.Errorf("%w: Config.ID is required", ErrInvalid)
	}
	if c.Epoch.IsZero() || c.Epoch.Temporary() {
		return fmt.Errorf("%w: Config.Epoch must be a real epoch (epoch.New)", ErrInvalid)
	}
	if c.Tree == nil || c.Journal == nil {
		return fmt.Errorf("%w: Config.Tree and Config.Journal are required", ErrInvalid)
	}
	*c = c.WithDefaults()
	if c.Timeout > c.Interval {
		return fmt.Errorf("%w: Timeout %v exceeds Interval %v", ErrInvalid, c.Timeout, c.Interval)
	}
	return nil
}

// Membership keeps this frontend's view of the cluster's members, replayed
// from the catalog, and delivers their transitions as Events in log order.
// While this frontend is the raft leader it also runs the monitor that
// heartbeats every member and journals transitions. Create it with New;
// its methods are safe for concurrent use; Close stops it.
type Membership struct {
	cfg       Config
	log       *slog.Logger
	responder *responder.Responder
	mon       *monitor
	metrics   *metrics

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		members map[uint64]Member
		closed  bool
	}
}

// New starts a Membership: it reads the member records present in the
// catalog, delivers them to OnEvent (Added, then Dead for dead ones) before
// it returns, then follows the catalog and runs the monitor.
func New(cfg Config) (*Membership, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	m := &Membership{cfg: cfg, log: cfg.Logger, metrics: newMetrics()}
	var err error
	m.responder, err = responder.New(responder.Config{ID: cfg.ID, Epoch: cfg.Epoch, Cluster: cfg.Cluster, Version: cfg.Version, Token: cfg.Token, PeerCerts: cfg.TLS != nil, Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	m.mu.members = make(map[uint64]Member)
	w := m.watch()
	m.resync()
	m.mon = newMonitor(m)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(2)
	go func() { defer m.wg.Done(); m.follow(ctx, w) }()
	go func() { defer m.wg.Done(); m.mon.run(ctx) }()
	return m, nil
}

// Handler returns this frontend's own heartbeat responder (mount it at
// Path): the leader probes frontends too, to learn their epochs.
func (m *Membership) Handler() http.Handler { return m.responder }

// Epoch returns this process's current epoch: Config.Epoch, until the log
// records that it ended (this frontend was declared dead) and the process
// draws a fresh one (see Responder).
func (m *Membership) Epoch() epoch.Epoch { return m.responder.Epoch() }

// Members returns the member records as this frontend has replayed them,
// ordered by id.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.mu.members))
	for _, r := range m.mu.members {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Member returns one member record as replayed.
func (m *Membership) Member(id uint64) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.mu.members[id]
	return r, ok
}

// Close stops following the catalog and the monitor, and waits for every
// goroutine (in-flight heartbeats are cancelled). Idempotent.
func (m *Membership) Close() error {
	m.mu.Lock()
	m.mu.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

func (m *Membership) watch() *catalog.Watcher {
	return m.cfg.Tree.Watch(catalog.WatchOptions{Prefix: MembersPath, Kind: MemberKind})
}

// follow delivers the catalog's member changes as events until ctx ends.
func (m *Membership) follow(ctx context.Context, w *catalog.Watcher) {
	defer func() { w.Close() }()
	for {
		ev, err := w.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil && ev.Op != catalog.OpResync {
			m.applyChange(ev)
			continue
		}
		// Fell behind, or Load replaced the tree: watch again, then
		// re-read and deliver the difference.
		w.Close()
		w = m.watch()
		m.resync()
	}
}

// applyChange derives and delivers the events of one catalog change.
func (m *Membership) applyChange(ev catalog.Event) {
	var id uint64
	var after *Member
	switch {
	case ev.After != nil:
		rec, err := memberFromNode(ev.After)
		if err != nil {
			m.log.Error("heartbeat: skipping bad member record", "err", err)
			return
		}
		id, after = rec.ID, &rec
	case ev.Before != nil:
		rec, err := memberFromNode(ev.Before)
		if err != nil {
			return
		}
		id = rec.ID
	default:
		return
	}
	m.mu.Lock()
	prev, had := m.mu.members[id]
	if had && ev.Index <= prev.Modified { // already read by a resync
		m.mu.Unlock()
		return
	}
	if !had && after == nil { // deleted before it was ever read
		m.mu.Unlock()
		return
	}
	var before *Member
	if had {
		before = &prev
	}
	if after != nil {
		m.mu.members[id] = *after
	} else {
		delete(m.mu.members, id)
	}
	m.mu.Unlock()
	m.deliver(eventsBetween(before, after, ev.Index))
}

// resync re-reads every member record and delivers the difference with
// the view, in index order.
func (m *Membership) resync() {
	index := m.cfg.Tree.Index()
	fresh := make(map[uint64]Member)
	for _, n := range m.cfg.Tree.OfKind(MemberKind) {
		if !strings.HasPrefix(n.Path, MembersPath+"/") {
			continue
		}
		rec, err := memberFromNode(&n)
		if err != nil {
			m.log.Error("heartbeat: skipping bad member record", "err", err)
			continue
		}
		fresh[rec.ID] = rec
	}
	m.mu.Lock()
	var evs []epoch.Event
	for id, old := range m.mu.members {
		if _, ok := fresh[id]; !ok {
			evs = append(evs, eventsBetween(&old, nil, index)...)
		}
	}
	for id, rec := range fresh {
		if old, ok := m.mu.members[id]; ok {
			if old.Modified != rec.Modified {
				evs = append(evs, eventsBetween(&old, &rec, rec.Modified)...)
			}
		} else {
			evs = append(evs, eventsBetween(nil, &rec, rec.Modified)...)
		}
	}
	m.mu.members = fresh
	m.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b epoch.Event) int { return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Node, b.Node)) })
	m.deliver(evs)
}

func (m *Membership) deliver(evs []epoch.Event) {
	for _, ev := range evs {
		m.log.Info("heartbeat: member event", "event", ev.String())
		if ev.Type <= epoch.Removed {
			m.metrics.events[ev.Type].Add(1)
		}
		if m.cfg.OnEvent != nil {
			m.cfg.OnEvent(ev)
		}
	}
}

// Add journals a new member record (status alive, epoch unknown until it
// first answers). ID, Addr and Kind are required. It fails with ErrExists
// if the id is taken.
func (m *Membership) Add(ctx context.Context, mem Member) error {
	if mem.ID == 0 || mem.Addr == "" || (mem.Kind != epoch.KindFrontend && mem.Kind != epoch.KindWorker) {
		return fmt.Errorf("%w: a member needs an id, an address and a kind", ErrInvalid)
	}
	if err := m.ensureLayout(ctx); err != nil {
		return err
	}
	rec := Member{ID: mem.ID, Addr: mem.Addr, Kind: mem.Kind, Role: mem.Role, Status: StatusAlive, Since: m.cfg.Clock.Now()}
	_, err := m.propose(ctx, catalog.Op{Type: catalog.OpCreate, Path: MemberPath(mem.ID), Kind: MemberKind, Set: rec.attrs(), Cond: catalog.Cond{Absent: true}})
	if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrExists) {
		return fmt.Errorf("%w: %d", ErrExists, mem.ID)
	}
	return err
}

// Remove journals the removal of member id's record; every frontend then
// delivers a Removed event, which cancels the member's queries.
func (m *Membership) Remove(ctx context.Context, id uint64) error {
	_, err := m.propose(ctx, catalog.Op{Type: catalog.OpDelete, Path: MemberPath(id), Cond: catalog.Cond{Exists: true}})
	if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrNotFound) {
		return fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return err
}

// ensureLayout creates /_cluster, its members and monitor nodes if absent.
func (m *Membership) ensureLayout(ctx context.Context) error {
	var ops []catalog.Op
	for _, n := range []struct{ path, kind string }{{ClusterPath, "cluster"}, {MembersPath, "members"}, {MonitorPath, "monitor"}} {
		if _, ok := m.cfg.Tree.Get(n.path); !ok {
			ops = append(ops, catalog.Op{Type: catalog.OpCreate, Path: n.path, Kind: n.kind, Cond: catalog.Cond{Absent: true}})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	_, err := m.propose(ctx, ops...)
	if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrExists) {
		return nil // another frontend created it meanwhile
	}
	return err
}

// propose journals one batch and returns its result; a batch that failed
// returns its *catalog.OpError.
func (m *Membership) propose(ctx context.Context, ops ...catalog.Op) (*catalog.Result, error) {
	m.mu.Lock()
	closed := m.mu.closed
	m.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var data []byte
	var err error
	if m.cfg.BatchVersion != nil {
		data, err = catalog.Batch{Ops: ops}.EncodeVersion(m.cfg.BatchVersion())
	} else {
		data, err = catalog.Batch{Ops: ops}.Encode()
	}
	if err != nil {
		return nil, operr.Errorf("heartbeat: encode batch: %w", err)
	}
	_, v, err := m.cfg.Journal.Propose(ownWriteContext(ctx), data)
	if err != nil {
		return nil, operr.Errorf("heartbeat: propose: %w", err)
	}
	res, ok := v.(*catalog.Result)
	if !ok {
		return nil, fmt.Errorf("heartbeat: propose returned %T, want *catalog.Result", v)
	}
	if res.Err != nil {
		return res, operr.Errorf("heartbeat: %w", res.Err)
	}
	return res, nil
}

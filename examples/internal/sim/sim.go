package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// DefaultDuration is Options.Duration when it is 0.
const DefaultDuration = 2 * time.Minute

// RecoveryBound is how long, in simulated time, the cluster has after the
// last fault heals (every link restored, every frontend running) to elect
// a leader and accept a write.
const RecoveryBound = 30 * time.Second

// Options configure one run.
type Options struct {
	// Seed drives every choice of the run: the cluster's size, the
	// workload and the faults.
	Seed uint64
	// Duration is the simulated time the workload runs under faults;
	// default DefaultDuration.
	Duration time.Duration
	// Frontends is the number of voting frontends; 0 draws the
	// cluster's shape from the seed: three to five voters, or (one run in
	// four) a sole voter with one to three observers.
	Frontends int
	// Configure, when set, adjusts the frontends' config template (a test
	// that narrows a timeout, say).
	Configure func(*frontend.Config)
	// Extend, when set, runs once the cluster is up, before the workload,
	// with the cluster and a random source of the seed's: the place where
	// more members or faults join the run (every run has its workers,
	// queries, watchers and owned nodes already). What it starts must stop
	// when ctx ends.
	Extend func(ctx context.Context, c *frontendtest.Cluster, rng *rand.Rand)
	// Trace, when set, receives every fault and non-register event as it
	// happens, stamped with the simulated time since the start (a replay
	// under -v shows what the run did).
	Trace func(string)
}

// Result is what one run did and found.
type Result struct {
	Seed uint64
	// Frontends is the number of frontends, Observers how many of them
	// are observers (the others vote).
	Frontends, Observers int
	// Simulated is the virtual time the run took, set-up and checks
	// included.
	Simulated time.Duration
	// Ops is the number of client operations completed; Faults the
	// number of faults injected.
	Ops, Faults int
	// Queries is the number of queries registered across a coordinator
	// and workers; Cancelled of those a member's change cancelled, and
	// Bounded of those whose cancellation was held to the README's bound.
	Queries, Cancelled, Bounded int
	// Resumes is the number of watch sessions, each resumed from an index.
	Resumes int
	// Quota is the catalog quota every frontend ran with (zero: none);
	// QuotaRefusals the writes it refused (507 quota over HTTP).
	Quota         catalog.Quota
	QuotaRefusals int
	// Fills is the number of times the filler brought the catalog to
	// within a byte (or to the last node) of its quota; FullTransitions
	// the member records' transitions journaled while it was full.
	Fills, FullTransitions int
	// HTTPOps is the number of the HTTP clients' requests answered 2xx.
	HTTPOps int
	// Owned is the number of owned task nodes created; StaleFences of the
	// writes sent with a fence whose epoch had ended.
	Owned, StaleFences int
	// History is a hash of the run's events in the order they happened
	// (each client operation with its outcome, each fault): two runs of
	// one seed with the same hash saw the same history.
	History uint64
	// FaultHistory is the hash of the faults alone, in order.
	FaultHistory uint64
	// Disaster is the operator's recovery the run went through
	// (disaster.go): "force-new-cluster", "restore", or "" for none.
	Disaster string
	// Failures are the checks that failed, each a sentence naming what it
	// saw; empty: the run passed.
	Failures []string
}

// Failed reports whether a check failed.
func (r *Result) Failed() bool { return len(r.Failures) > 0 }

// Replay is the command that reruns the seed.
func (r *Result) Replay() string {
	return fmt.Sprintf("go run ./examples/sim -seed %d", r.Seed)
}

// reportedFailures is how many failures Report lists: a run that fails
// often fails the same way many times (a removed member answering every
// request), and its first failures say what happened.
const reportedFailures = 20

// Report is the run's report: its seed, its figures, its first failures
// and the command that replays it.
func (r *Result) Report() string {
	status := "ok"
	if r.Failed() {
		status = "FAILED"
	}
	s := fmt.Sprintf("seed %d: %s: %d frontends (%d observers), %d ops (%d over HTTP), %d faults, %d queries (%d cancelled, %d held to the bound), %d watch resumes, %d owned nodes, %d stale fences, quota %+v (%d refusals, %d fills, %d transitions while full), recovery %q, %v simulated, history %016x, faults %016x", r.Seed, status, r.Frontends, r.Observers, r.Ops, r.HTTPOps, r.Faults, r.Queries, r.Cancelled, r.Bounded, r.Resumes, r.Owned, r.StaleFences, r.Quota, r.QuotaRefusals, r.Fills, r.FullTransitions, r.Disaster, r.Simulated.Round(time.Second), r.History, r.FaultHistory)
	for i, f := range r.Failures {
		if i == reportedFailures {
			s += fmt.Sprintf("\n  - … and %d more failures", len(r.Failures)-i)
			break
		}
		s += "\n  - " + f
	}
	if r.Failed() {
		s += "\n  replay: " + r.Replay()
	}
	return s
}

// run is the state of one run.
type run struct {
	opts     Options
	cfg      frontend.Config // the frontends' config template
	c        *frontendtest.Cluster
	n        int // frontends: the voters 1..voters, then the observers
	voters   int
	timeout  time.Duration // a request's: the frontends' RequestTimeout
	value    atomic.Int64  // numbers the nemesis's own writes
	diskSlow atomic.Bool   // a voter's fsyncs take longer than the election timeout
	diskLow  atomic.Bool   // a frontend's disk is under the journal's reserve (fullDisk)
	promoted atomic.Bool   // an observer's promotion was tried (promote): no slow disk
	healed   time.Time     // when recover healed the faults
	trans    *transLog     // the frontends' logged member transitions
	// quotaRefusals counts the clients' writes the quota refused.
	quotaRefusals atomic.Int64
	// httpOK counts the HTTP clients' operations that completed (2xx).
	httpOK   atomic.Int64
	hist     *history
	clocks   *clocks    // the members' wall clocks
	fleet    *fleet     // the frontends the cluster holds (membership)
	mem      *members   // the workers and queries (removeWorker)
	cl       *clients   // the workload, which the nemesis's own reads join
	ws       *watches   // the watchers (an operator's recovery cuts their sessions)
	own      *owned     // the owned nodes (an operator's recovery drops the lost ones)
	dis      *disaster  // the run's operator recovery, if any (disaster.go)
	mu       sync.Mutex // guards failures
	failures []string
}

func (r *run) failf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures = append(r.failures, s)
	r.mu.Unlock()
	if r.opts.Trace != nil {
		r.opts.Trace("FAILED: " + s)
	}
}

// Run runs one seeded simulation and checks it. t must be the *testing.T
// of a testing/synctest bubble (synctest.Test), so that time is virtual;
// the cluster is closed when Run returns, and the bubble's end finds any
// goroutine left behind. Set-up failures fail t; the checks' failures are
// in the Result.
func Run(t *testing.T, opts Options) *Result {
	if opts.Duration == 0 {
		opts.Duration = DefaultDuration
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	voters, observers := opts.Frontends, 0
	if voters == 0 {
		voters = 3 + rng.IntN(3)
		if rng.IntN(4) == 0 {
			voters, observers = 1, 1+rng.IntN(3)
		}
	}
	n := voters + observers
	start := time.Now()
	// Images come often and the log keeps few entries behind them (the
	// dedupe window is as wide as that margin), so that nodes replay from
	// an image the log starts after and retried writes straddle images.
	//
	// A sole voter's disk may be slow (an fsync of up to 3 s): its
	// requests wait up to 10 s, two fsyncs and an election.
	timeout := 3 * time.Second
	if voters == 1 {
		timeout = 10 * time.Second
	}
	cfg := frontend.Config{
		Token:              "sim",
		RequestTimeout:     timeout,
		CheckpointEntries:  []uint64{16, 32, 64}[rng.IntN(3)],
		CheckpointInterval: 2 * time.Second,
		CompactMargin:      []uint64{32, 64}[rng.IntN(2)],
		Quota:              drawQuota(opts.Seed),
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	clocks := newClocks()
	trans := &transLog{}
	c := frontendtest.NewCluster(t, frontendtest.Options{Frontends: voters, Observers: observers, InMemory: true, Config: cfg,
		DiskFree: diskFree, Clock: clocks.clock, Start: func(ctx context.Context, fc frontend.Config) (*frontend.Frontend, error) {
			fc.Logger = trans.logger(fc.ID)
			return startAPI(ctx, fc)
		}})
	c.Network().Seed(rng.Uint64())
	r := &run{opts: opts, cfg: cfg, c: c, n: n, voters: voters, timeout: timeout, hist: newHistory(start, opts.Trace), clocks: clocks, fleet: newFleet(n), trans: trans}
	res := &Result{Seed: opts.Seed, Frontends: n, Observers: observers, Quota: cfg.Quota}
	defer func() {
		for _, i := range r.everIDs() {
			c.StopFrontend(i)
		}
		res.Simulated = time.Since(start)
	}()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := r.setup(ctx); err != nil {
		t.Fatalf("seed %d: set-up: %v", opts.Seed, err)
	}
	if opts.Extend != nil {
		opts.Extend(ctx, c, rand.New(rand.NewPCG(rng.Uint64(), 1)))
	}

	// The clients and the nemesis run for Duration; then the faults heal
	// and the checks run on a quiet cluster.
	// The owned nodes' set-up runs before the clients, which can fill a
	// run's quota.
	members := r.startMembers(ctx, opts.Duration)
	r.mem = members
	owned, err := r.startOwned(ctx, members)
	if err != nil {
		t.Fatalf("seed %d: set-up of the owned nodes: %v", opts.Seed, err)
	}
	clients := startClients(ctx, r, 4, rng.Uint64())
	r.cl = clients
	fill := r.startFiller(ctx, rand.New(rand.NewPCG(opts.Seed, 0xf111)))
	watches := r.startWatches(ctx)
	r.ws, r.own = watches, owned
	r.dis = drawDisaster(opts.Seed, voters, time.Now(), opts.Duration)
	faults := r.nemesis(ctx, rand.New(rand.NewPCG(rng.Uint64(), 2)), opts.Duration)
	fill.end(ctx)
	members.endFaults(ctx)
	r.recover(ctx)
	members.finish(ctx)
	r.checkRecords(ctx, r.healed, members.viewRecords)
	owned.end()
	clients.stop()
	watches.end(ctx)
	r.check(ctx, clients)
	res.Queries, res.Cancelled, res.Bounded = members.checkQueries()
	res.Bounded += members.checkRemovalBound(r.removals())
	watches.check()
	owned.checkAll()
	res.Owned, res.StaleFences = len(owned.nodes), owned.stale
	res.Resumes = watches.resumes

	res.Ops, res.Faults = r.hist.ops(), faults
	if r.dis.done {
		res.Disaster = r.dis.kind
	}
	res.QuotaRefusals = int(r.quotaRefusals.Load())
	res.Fills, res.FullTransitions = fill.counts()
	res.HTTPOps = int(r.httpOK.Load())
	res.History, res.FaultHistory = r.hist.hashes()
	res.Failures = r.failures
	return res
}

// keys is the number of registers the clients share.
const keys = 6

func keyPath(k int) string { return fmt.Sprintf("/kv/k%d", k) }

// setup waits for a leader and creates the registers and the directory
// of the clients' unique creates.
func (r *run) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	leader, err := r.c.Leader(ctx)
	if err != nil {
		return err
	}
	ops := []catalog.Op{
		{Type: catalog.OpCreate, Path: "/kv", Kind: "dir"},
		{Type: catalog.OpCreate, Path: "/acked", Kind: "dir"},
	}
	for k := range keys {
		ops = append(ops, catalog.Op{Type: catalog.OpCreate, Path: keyPath(k), Kind: "register", Set: map[string]catalog.Value{"v": catalog.String("")}})
	}
	_, err = r.c.Frontend(leader).Write(ctx, catalog.Batch{Ops: ops})
	return err
}

// running returns the member frontends that run now, by index.
func (r *run) running() []int {
	var out []int
	for _, i := range r.ids() {
		if r.c.Frontend(i) != nil {
			out = append(out, i)
		}
	}
	return out
}

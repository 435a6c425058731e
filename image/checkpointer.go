package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/internal/operr"
)

// Journal is what a Checkpointer needs of the journal;
// journal.ImageLogOf(j) satisfies it.
type Journal interface {
	// ReadEntries calls fn for every user entry in (after, upTo], in order;
	// upTo must not exceed the applied index.
	ReadEntries(ctx context.Context, after, upTo uint64, fn func(index uint64, data []byte) error) error
	// MembershipAt returns the membership blob as of index.
	MembershipAt(index uint64) ([]byte, error)
	// TermAt returns the term of the entry at index.
	TermAt(index uint64) (uint64, error)
	// ImageWritten records a durable image as raft's snapshot and lets the
	// journal compact its log behind it, up to an earlier image (keeping a
	// margin for slow followers).
	ImageWritten(ctx context.Context, index, term uint64, membership []byte) error
	// FirstIndex returns the first index the log still holds; the log
	// starts right after an image at FirstIndex()-1 (or at 1), which Prune
	// then keeps.
	FirstIndex() (uint64, error)
}

// CheckpointerConfig configures a Checkpointer. Zero fields take the
// documented defaults.
type CheckpointerConfig struct {
	// Store is where images are written. Required.
	Store *Store
	// Journal supplies the entries to replay and compacts after an image.
	// Required.
	Journal Journal
	// Applied returns the journal's applied index, e.g.
	// func() uint64 { return j.Status().Applied }. Required.
	Applied func() uint64
	// NewState returns a fresh, empty state for the shadow replay, e.g.
	// func() image.State { return catalog.New() }. Required.
	NewState func() State
	// Threshold is how many entries past the newest image trigger a
	// checkpoint. The default is 100,000.
	Threshold uint64
	// Interval is how often the threshold is checked (and a failed
	// checkpoint retried). The default is 60 s.
	Interval time.Duration
	// Enabled, when set, is asked before each timed checkpoint; returning
	// false means no shadow replay on this node now (e.g. while it leads,
	// to spare the leader the shadow copy's memory when followers
	// checkpoint). With Peers set, such a node adopts a peer's image
	// instead; without, it skips the checkpoint and its log is not
	// compacted meanwhile (logged at every check that finds the threshold
	// met). Checkpoint on demand ignores it.
	Enabled func() bool
	// Peers, when set, returns the addresses (host:port or base URLs) of
	// the other nodes, which serve their Store's Handler under PathPrefix.
	// When Enabled is false at a timed check that finds the threshold met,
	// the Checkpointer asks each for its newest image and adopts the newest
	// one past this node's newest image and at or below its applied index:
	// it downloads it (verified, crash safe, single-flight with restores),
	// checks that this node's log has the image's term at its index (the
	// same history, so the same bytes this node would write), keeps it as
	// image.<index> without loading it (the live state is already past it)
	// and records it with Journal.ImageWritten, so the log is compacted
	// without a shadow copy here. When no peer has one, the check fails
	// with ErrNoPeerImage (logged, in Status) and is retried at the next
	// interval, unless ShadowFallback is set.
	Peers func() []string
	// ShadowFallback makes a node on which Enabled is false checkpoint by
	// shadow replay after all when no peer has an image to adopt, paying
	// the memory rather than letting its log grow for another interval.
	ShadowFallback bool
	// Clock drives the interval. The default is the real clock.
	Clock Clock
	// Logger receives a line per checkpoint and every failure. The default
	// discards.
	Logger *slog.Logger

	testingKnobs checkpointerKnobs
}

type checkpointerKnobs struct {
	// afterTick is called after each timed check, with its result.
	afterTick func(ran bool, info Info, err error)
	// afterRequested is called after each checkpoint the journal asked
	// for (Store.RequestImage), with its result.
	afterRequested func(info Info, err error)
}

// CheckpointStatus reports a Checkpointer's progress; a failing checkpoint
// shows here (and in the log) until one succeeds.
type CheckpointStatus struct {
	// Running is true while a checkpoint is in progress.
	Running bool
	// Last is the newest image this Checkpointer wrote or adopted.
	Last Info
	// LastSource is the peer Last was adopted from; "" when it was written
	// here.
	LastSource string
	// LastSuccess is when it finished; LastDuration how long it took.
	LastSuccess  time.Time
	LastDuration time.Duration
	// LastError is the error of the most recent checkpoint if it failed
	// (nil after a success), LastErrorAt when.
	LastError   error
	LastErrorAt time.Time
	// Failures counts consecutive failed checkpoints.
	Failures int
	// Written counts images written here or adopted from peers; Adopted
	// counts those adopted.
	Written int
	Adopted int
}

// Checkpointer writes images by shadow replay: it loads the newest image
// into a fresh state, replays the journal's entries up to the applied index
// into it, writes the image and lets the journal compact behind it. The live
// state is never touched or locked. Where shadow replay is disabled
// (CheckpointerConfig.Enabled) it adopts a peer's image instead
// (CheckpointerConfig.Peers). One checkpoint or adoption runs at a time. It
// owns one goroutine (the interval check), stopped and awaited by Close. It
// is safe for concurrent use.
type Checkpointer struct {
	cfg    CheckpointerConfig
	logger *slog.Logger
	reqs   chan checkpointReq
	// wantc carries the journal's requests for a new image (cap 1: one
	// pending request covers the next ones); see Store.RequestImage.
	wantc  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	// metrics count the attempts by result, for Collector.
	metrics *checkpointMetrics

	// pending is an image written or adopted whose ImageWritten failed;
	// the loop goroutine retries recording it before anything else.
	pending *outcome

	mu struct {
		sync.Mutex
		status CheckpointStatus
	}
}

type checkpointReq struct {
	ctx   context.Context
	reply chan checkpointResult
}

type checkpointResult struct {
	info Info
	err  error
}

// WithDefaults returns a copy of c in which every zero field that has a
// default holds it: the configuration NewCheckpointer runs with. Required
// fields stay as they are; nothing is validated. It is the one place the
// defaults live.
func (c CheckpointerConfig) WithDefaults() CheckpointerConfig {
	if c.Threshold == 0 {
		c.Threshold = 100_000
	}
	if c.Interval == 0 {
		c.Interval = 60 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// NewCheckpointer validates cfg, fills defaults and starts the interval
// loop.
func NewCheckpointer(cfg CheckpointerConfig) (*Checkpointer, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("image: CheckpointerConfig.Store is required")
	case cfg.Journal == nil:
		return nil, errors.New("image: CheckpointerConfig.Journal is required")
	case cfg.Applied == nil:
		return nil, errors.New("image: CheckpointerConfig.Applied is required")
	case cfg.NewState == nil:
		return nil, errors.New("image: CheckpointerConfig.NewState is required")
	case cfg.Interval < 0:
		return nil, fmt.Errorf("image: CheckpointerConfig.Interval %v is negative", cfg.Interval)
	}
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Checkpointer{
		cfg:    cfg,
		logger: cfg.Logger.With("component", "image.checkpointer"),
		reqs:   make(chan checkpointReq),
		wantc:  make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	c.metrics = newCheckpointMetrics()
	tickc, stopTick := cfg.Clock.NewTicker(cfg.Interval)
	go c.run(ctx, tickc, stopTick)
	cfg.Store.checkpointer.Store(c)
	return c, nil
}

// requestImage asks the loop for a checkpoint without blocking the caller.
func (c *Checkpointer) requestImage() {
	select {
	case c.wantc <- struct{}{}:
	default:
	}
}

// Close stops the loop, cancelling a checkpoint in progress, and waits for
// it. Close is idempotent.
func (c *Checkpointer) Close() error {
	c.cfg.Store.checkpointer.CompareAndSwap(c, nil)
	c.once.Do(c.cancel)
	<-c.done
	return nil
}

// Status returns a snapshot of the Checkpointer's progress.
func (c *Checkpointer) Status() CheckpointStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.status
}

// Checkpoint writes an image at the current applied index now (waiting for
// one in progress first) and returns it; if the newest image is already at
// the applied index it returns that one.
func (c *Checkpointer) Checkpoint(ctx context.Context) (Info, error) {
	req := checkpointReq{ctx: ctx, reply: make(chan checkpointResult, 1)}
	select {
	case c.reqs <- req:
	case <-c.done:
		return Info{}, ErrClosed
	case <-ctx.Done():
		return Info{}, context.Cause(ctx)
	}
	select {
	case r := <-req.reply:
		return r.info, r.err
	case <-ctx.Done():
		// The loop sees the same context and stops the checkpoint.
		return Info{}, context.Cause(ctx)
	}
}

func (c *Checkpointer) run(ctx context.Context, tickc <-chan time.Time, stopTick func()) {
	defer close(c.done)
	defer stopTick()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tickc:
			ran, info, err := c.tick(ctx)
			if k := c.cfg.testingKnobs.afterTick; k != nil {
				k(ran, info, err)
			}
		case <-c.wantc:
			info, err := c.checkpoint(ctx)
			if err != nil {
				c.logger.Warn("checkpoint requested by the journal failed", "err", err)
			}
			if k := c.cfg.testingKnobs.afterRequested; k != nil {
				k(info, err)
			}
		case req := <-c.reqs:
			rctx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(req.ctx, cancel)
			info, err := c.checkpoint(rctx)
			stop()
			cancel()
			req.reply <- checkpointResult{info, err}
		}
	}
}

// tick checkpoints when the applied index is Threshold or more past the
// newest image: by shadow replay, or, where that is disabled now, by
// adopting a peer's image. A failed checkpoint leaves the threshold met, so
// the next tick retries it.
func (c *Checkpointer) tick(ctx context.Context) (bool, Info, error) {
	enabled := c.cfg.Enabled == nil || c.cfg.Enabled()
	applied := c.cfg.Applied()
	var base uint64
	idx, err := c.cfg.Store.Indexes()
	if err != nil {
		c.fail(err, 0)
		return true, Info{}, err
	}
	if len(idx) > 0 {
		base = idx[0]
	}
	if c.pending == nil && (applied < base || applied-base < c.cfg.Threshold) {
		return false, Info{}, nil
	}
	switch {
	case enabled:
		info, err := c.checkpoint(ctx)
		return true, info, err
	case c.cfg.Peers != nil:
		info, err := c.attempt(ctx, c.adoptOrFallBack)
		return true, info, err
	}
	c.logger.Warn("checkpoint due but disabled on this node now (Enabled) and no Peers to adopt an image from; the log is not compacted until this node may checkpoint",
		"newest_image", base, "applied", applied)
	return false, Info{}, nil
}

// checkpoint runs one shadow-replay checkpoint up to the applied index.
func (c *Checkpointer) checkpoint(ctx context.Context) (Info, error) {
	return c.attempt(ctx, c.shadowReplay)
}

// outcome is what one checkpoint attempt did: wrote is false when nothing
// new was needed; source is the peer an adopted image came from.
type outcome struct {
	info   Info
	wrote  bool
	source string
}

// attempt runs one checkpoint through do, reporting it in the status and
// the log.
func (c *Checkpointer) attempt(ctx context.Context, do func(context.Context) (outcome, error)) (Info, error) {
	start := c.cfg.Clock.Now()
	c.mu.Lock()
	c.mu.status.Running = true
	c.mu.Unlock()
	out, err := do(ctx)
	took := c.cfg.Clock.Now().Sub(start)
	c.metrics.record(err, out.wrote, took)
	c.mu.Lock()
	st := &c.mu.status
	st.Running = false
	if err == nil {
		st.LastError, st.Failures = nil, 0
		if out.wrote {
			st.Last, st.LastSource = out.info, out.source
			st.LastSuccess, st.LastDuration = c.cfg.Clock.Now(), took
			st.Written++
			if out.source != "" {
				st.Adopted++
			}
		}
	}
	c.mu.Unlock()
	switch {
	case err != nil:
		c.fail(err, took)
		return Info{}, err
	case !out.wrote:
	case out.source != "":
		c.logger.Info("checkpoint adopted from a peer", "image", out.info.Name, "index", out.info.Index, "peer", out.source, "bytes", out.info.Size, "took", took)
	default:
		c.logger.Info("checkpoint written", "image", out.info.Name, "index", out.info.Index, "bytes", out.info.Size, "took", took)
	}
	return out.info, nil
}

func (c *Checkpointer) fail(err error, took time.Duration) {
	c.mu.Lock()
	st := &c.mu.status
	st.LastError, st.LastErrorAt = err, c.cfg.Clock.Now()
	st.Failures++
	n := st.Failures
	c.mu.Unlock()
	level := slog.LevelError
	if errors.Is(err, ErrNoPeerImage) {
		level = slog.LevelWarn // peers usually have one by the next interval
	}
	c.logger.Log(context.Background(), level, "checkpoint failed; retrying at the next interval", "err", err, "consecutive_failures", n, "took", took)
}

// retryPending records an image whose recording failed before (nil when
// there was none or a restore moved past it).
func (c *Checkpointer) retryPending(ctx context.Context, idx []uint64) (*outcome, error) {
	p := c.pending
	if p == nil {
		return nil, nil
	}
	if len(idx) > 0 && idx[0] > p.info.Index {
		c.pending = nil // a restore moved past it
		return nil, nil
	}
	if err := c.record(ctx, p.info); err != nil {
		return nil, err
	}
	return p, nil
}

func (c *Checkpointer) shadowReplay(ctx context.Context) (outcome, error) {
	s := c.cfg.Store
	idx, err := s.Indexes()
	if err != nil {
		return outcome{}, err
	}
	recorded, err := c.retryPending(ctx, idx)
	if err != nil {
		return outcome{}, err
	}
	target := c.cfg.Applied()
	if len(idx) > 0 && idx[0] >= target {
		if recorded != nil && recorded.info.Index == idx[0] {
			return *recorded, nil // the retried part was all that was left
		}
		// Nothing new (a restore may even have put us ahead).
		info, err := s.readHeader(imageName(idx[0]))
		return outcome{info: info}, err
	}
	info, err := c.replayAndWrite(ctx, s, idx, target)
	return outcome{info: info, wrote: err == nil}, err
}

// replayAndWrite loads the newest image at or below target into a fresh
// state, replays the entries up to target into it, writes the image and
// records it.
func (c *Checkpointer) replayAndWrite(ctx context.Context, s *Store, idx []uint64, target uint64) (Info, error) {
	phase := c.cfg.Clock.Now()
	shadow, from, err := c.loadBase(ctx, idx, target)
	if err != nil {
		return Info{}, err
	}
	c.logger.Debug("checkpoint: shadow loaded", "base", from, "took", c.cfg.Clock.Now().Sub(phase))
	phase = c.cfg.Clock.Now()
	term, err := c.cfg.Journal.TermAt(target)
	if err != nil {
		return Info{}, operr.Errorf("image: checkpoint: term at %d: %w", target, err)
	}
	membership, err := c.cfg.Journal.MembershipAt(target)
	if err != nil {
		return Info{}, operr.Errorf("image: checkpoint: membership at %d: %w", target, err)
	}
	n := 0
	err = c.cfg.Journal.ReadEntries(ctx, from, target, func(index uint64, data []byte) error {
		shadow.Apply(index, data)
		if n++; n%256 == 0 {
			runtime.Gosched() // background work: see ctxWriter
		}
		return nil
	})
	if err != nil {
		return Info{}, operr.Errorf("image: checkpoint: replay (%d, %d]: %w", from, target, err)
	}
	c.logger.Debug("checkpoint: replayed", "from", from, "to", target, "took", c.cfg.Clock.Now().Sub(phase))
	info, err := s.Write(ctx, Header{Index: target, Term: term, Membership: membership}, shadow.Save)
	if err != nil {
		return Info{}, operr.Errorf("image: checkpoint at %d: %w", target, err)
	}
	shadow = nil // let the shadow copy go before the journal compacts
	if err := c.record(ctx, info); err != nil {
		c.pending = &outcome{info: info, wrote: true}
		return Info{}, err
	}
	return info, nil
}

// record tells the journal about a durable image, then prunes: older images
// go only once the new one is durable and raft's snapshot.
func (c *Checkpointer) record(ctx context.Context, info Info) error {
	if err := c.cfg.Journal.ImageWritten(ctx, info.Index, info.Term, info.Membership); err != nil {
		return operr.Errorf("image: checkpoint at %d written, but the journal did not record it: %w", info.Index, err)
	}
	c.pending = nil
	first, err := c.cfg.Journal.FirstIndex()
	if err != nil {
		c.logger.Warn("pruning skipped: the journal's first index is unknown", "err", err)
		return nil
	}
	c.cfg.Store.Retain(first - 1)
	if err := c.cfg.Store.Prune(); err != nil {
		c.logger.Warn("pruning old images failed", "err", err)
	}
	return nil
}

// loadBase loads the newest image at or below target into a fresh shadow
// state and returns it with the image's index (0 with no image). A corrupt
// image is skipped for an older one; the replay then fails if the journal
// no longer covers the gap.
func (c *Checkpointer) loadBase(ctx context.Context, idx []uint64, target uint64) (State, uint64, error) {
	var failures []error
	for _, i := range idx {
		if i > target {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, context.Cause(ctx)
		}
		shadow := c.cfg.NewState()
		_, err := c.cfg.Store.loadInto(shadow, imageName(i), false)
		if err == nil {
			if len(failures) > 0 {
				c.logger.Warn("checkpoint base: skipped bad images", "base", imageName(i), "err", errors.Join(failures...))
			}
			return shadow, i, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
			return nil, 0, operr.Errorf("image: checkpoint: load base: %w", err)
		}
		failures = append(failures, err)
	}
	if len(failures) > 0 {
		c.logger.Warn("checkpoint base: no valid image; replaying from the journal's start", "err", errors.Join(failures...))
	}
	return c.cfg.NewState(), 0, nil
}

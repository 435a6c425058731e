package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// Journal is what a Checkpointer needs of the journal; *journal.Journal
// satisfies it.
type Journal interface {
	// ReadEntries calls fn for every user entry in (after, upTo], in order;
	// upTo must not exceed the applied index.
	ReadEntries(ctx context.Context, after, upTo uint64, fn func(index uint64, data []byte) error) error
	// MembershipAt returns the membership blob as of index.
	MembershipAt(index uint64) ([]byte, error)
	// TermAt returns the term of the entry at index.
	TermAt(index uint64) (uint64, error)
	// ImageWritten records a durable image as raft's snapshot and lets the
	// journal compact its log behind it (keeping a margin for slow
	// followers).
	ImageWritten(ctx context.Context, index, term uint64, membership []byte) error
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
	// false skips it (e.g. while this node leads, to spare the leader the
	// shadow copy's memory when followers checkpoint). Checkpoint on demand
	// ignores it.
	Enabled func() bool
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
}

// CheckpointStatus reports a Checkpointer's progress; a failing checkpoint
// shows here (and in the log) until one succeeds.
type CheckpointStatus struct {
	// Running is true while a checkpoint is in progress.
	Running bool
	// Last is the newest image this Checkpointer wrote.
	Last Info
	// LastSuccess is when it finished; LastDuration how long it took.
	LastSuccess  time.Time
	LastDuration time.Duration
	// LastError is the error of the most recent checkpoint if it failed
	// (nil after a success), LastErrorAt when.
	LastError   error
	LastErrorAt time.Time
	// Failures counts consecutive failed checkpoints.
	Failures int
	// Written counts images written.
	Written int
}

// Checkpointer writes images by shadow replay: it loads the newest image
// into a fresh state, replays the journal's entries up to the applied index
// into it, writes the image and lets the journal compact behind it. The live
// state is never touched or locked. One checkpoint runs at a time. It owns
// one goroutine (the interval check), stopped and awaited by Close. It is
// safe for concurrent use.
type Checkpointer struct {
	cfg    CheckpointerConfig
	logger *slog.Logger
	reqs   chan checkpointReq
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// pending is an image written whose ImageWritten failed; the loop
	// goroutine retries recording it before anything else.
	pending *Info

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
	if cfg.Threshold == 0 {
		cfg.Threshold = 100_000
	}
	if cfg.Interval == 0 {
		cfg.Interval = 60 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Checkpointer{
		cfg:    cfg,
		logger: cfg.Logger.With("component", "image.checkpointer"),
		reqs:   make(chan checkpointReq),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	ticker := cfg.Clock.NewTicker(cfg.Interval)
	go c.run(ctx, ticker)
	return c, nil
}

// Close stops the loop, cancelling a checkpoint in progress, and waits for
// it. Close is idempotent.
func (c *Checkpointer) Close() error {
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

func (c *Checkpointer) run(ctx context.Context, ticker Ticker) {
	defer close(c.done)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			ran, info, err := c.tick(ctx)
			if k := c.cfg.testingKnobs.afterTick; k != nil {
				k(ran, info, err)
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
// newest image. A failed checkpoint leaves the threshold met, so the next
// tick retries it.
func (c *Checkpointer) tick(ctx context.Context) (bool, Info, error) {
	if c.cfg.Enabled != nil && !c.cfg.Enabled() {
		c.logger.Debug("checkpoint check skipped: disabled on this node now (Enabled)")
		return false, Info{}, nil
	}
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
	info, err := c.checkpoint(ctx)
	return true, info, err
}

// checkpoint runs one shadow-replay checkpoint up to the applied index.
func (c *Checkpointer) checkpoint(ctx context.Context) (Info, error) {
	start := c.cfg.Clock.Now()
	c.mu.Lock()
	c.mu.status.Running = true
	c.mu.Unlock()
	info, wrote, err := c.shadowReplay(ctx)
	took := c.cfg.Clock.Now().Sub(start)
	c.mu.Lock()
	st := &c.mu.status
	st.Running = false
	if err == nil && wrote {
		st.Last, st.LastSuccess, st.LastDuration = info, c.cfg.Clock.Now(), took
		st.LastError, st.Failures = nil, 0
		st.Written++
	}
	c.mu.Unlock()
	if err != nil {
		c.fail(err, took)
		return Info{}, err
	}
	if !wrote {
		c.mu.Lock()
		st.LastError, st.Failures = nil, 0
		c.mu.Unlock()
		return info, nil
	}
	c.logger.Info("checkpoint written", "image", info.Name, "index", info.Index, "bytes", info.Size, "took", took)
	return info, nil
}

func (c *Checkpointer) fail(err error, took time.Duration) {
	c.mu.Lock()
	st := &c.mu.status
	st.LastError, st.LastErrorAt = err, c.cfg.Clock.Now()
	st.Failures++
	n := st.Failures
	c.mu.Unlock()
	c.logger.Error("checkpoint failed; retrying at the next interval", "err", err, "consecutive_failures", n, "took", took)
}

func (c *Checkpointer) shadowReplay(ctx context.Context) (info Info, wrote bool, err error) {
	s := c.cfg.Store
	idx, err := s.Indexes()
	if err != nil {
		return Info{}, false, err
	}
	var recorded *Info
	if p := c.pending; p != nil {
		if len(idx) > 0 && idx[0] > p.Index {
			c.pending = nil // a restore moved past it
		} else if err := c.record(ctx, *p); err != nil {
			return Info{}, false, err
		} else {
			recorded = p
		}
	}
	target := c.cfg.Applied()
	if len(idx) > 0 && idx[0] >= target {
		if recorded != nil && recorded.Index == idx[0] {
			return *recorded, true, nil // the retried part was all that was left
		}
		// Nothing new (a restore may even have put us ahead).
		info, err := s.readHeader(imageName(idx[0]))
		return info, false, err
	}
	phase := c.cfg.Clock.Now()
	shadow, from, err := c.loadBase(ctx, idx, target)
	if err != nil {
		return Info{}, false, err
	}
	c.logger.Debug("checkpoint: shadow loaded", "base", from, "took", c.cfg.Clock.Now().Sub(phase))
	phase = c.cfg.Clock.Now()
	term, err := c.cfg.Journal.TermAt(target)
	if err != nil {
		return Info{}, false, fmt.Errorf("image: checkpoint: term at %d: %w", target, err)
	}
	membership, err := c.cfg.Journal.MembershipAt(target)
	if err != nil {
		return Info{}, false, fmt.Errorf("image: checkpoint: membership at %d: %w", target, err)
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
		return Info{}, false, fmt.Errorf("image: checkpoint: replay (%d, %d]: %w", from, target, err)
	}
	c.logger.Debug("checkpoint: replayed", "from", from, "to", target, "took", c.cfg.Clock.Now().Sub(phase))
	info, err = s.Write(ctx, Header{Index: target, Term: term, Membership: membership}, shadow.Save)
	if err != nil {
		return Info{}, false, fmt.Errorf("image: checkpoint at %d: %w", target, err)
	}
	shadow = nil // let the shadow copy go before the journal compacts
	if err := c.record(ctx, info); err != nil {
		p := info
		c.pending = &p
		return Info{}, false, err
	}
	return info, true, nil
}

// record tells the journal about a durable image, then prunes: older images
// go only once the new one is durable and raft's snapshot.
func (c *Checkpointer) record(ctx context.Context, info Info) error {
	if err := c.cfg.Journal.ImageWritten(ctx, info.Index, info.Term, info.Membership); err != nil {
		return fmt.Errorf("image: checkpoint at %d written, but the journal did not record it: %w", info.Index, err)
	}
	c.pending = nil
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
			return nil, 0, fmt.Errorf("image: checkpoint: load base: %w", err)
		}
		failures = append(failures, err)
	}
	if len(failures) > 0 {
		c.logger.Warn("checkpoint base: no valid image; replaying from the journal's start", "err", errors.Join(failures...))
	}
	return c.cfg.NewState(), 0, nil
}

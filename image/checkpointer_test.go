package image

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/fakejournal"
)

// fakeClock hands out one manual ticker.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
	c   chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_000_000, 0), c: make(chan time.Time)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTicker(time.Duration) (<-chan time.Time, func()) { return f.c, func() {} }

func (f *fakeClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	panic("fakeClock: no timers")
}

func (f *fakeClock) AfterFunc(time.Duration, func()) func() bool { panic("fakeClock: no timers") }

// tick advances the clock by d and delivers a tick (the loop must be idle).
func (f *fakeClock) tick(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	f.mu.Unlock()
	f.c <- now
}

type tickResult struct {
	ran  bool
	info Info
	err  error
}

type node struct {
	fs    vfs.FS
	store *Store
	live  *kvState
	j     *kvJournal
	clock *fakeClock
	cp    *Checkpointer
	ticks chan tickResult
}

func newNode(t testing.TB, fs vfs.FS, opts ...func(*CheckpointerConfig)) *node {
	t.Helper()
	n := &node{fs: fs, live: newKV(), clock: newFakeClock(), ticks: make(chan tickResult, 16)}
	n.store = openStore(t, fs, "/data", n.live)
	n.j = newKVJournal(n.live)
	cfg := CheckpointerConfig{
		Store: n.store, Journal: n.j, Applied: n.j.Index,
		NewState:  func() State { return newKV() },
		Threshold: 100, Clock: n.clock, Logger: testLogger(t),
	}
	cfg.testingKnobs.afterTick = func(ran bool, info Info, err error) { n.ticks <- tickResult{ran, info, err} }
	for _, o := range opts {
		o(&cfg)
	}
	cp, err := NewCheckpointer(cfg)
	require.NoError(t, err)
	n.cp = cp
	t.Cleanup(func() { cp.Close() })
	return n
}

func TestCheckpointShadowReplay(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, vfs.NewMem())
	n.j.append(250)
	info, err := n.cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(250), info.Index)
	require.Equal(t, []uint64{250}, n.j.Images(), "the journal was told")
	require.Zero(t, n.j.Compacted(), "the first image compacts nothing: the log starts after an image or at 1")

	shadow := newKV()
	_, err = n.store.loadInto(shadow, info.Name, true)
	require.NoError(t, err)
	require.Equal(t, n.live.snapshot(), shadow.snapshot())

	// The next checkpoint starts from that image: the log before it is gone.
	n.j.append(100)
	info, err = n.cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(350), info.Index)
	shadow = newKV()
	_, err = n.store.loadInto(shadow, info.Name, true)
	require.NoError(t, err)
	require.Equal(t, expectedKV(350), shadow.snapshot())
	require.Equal(t, uint64(250), n.j.Compacted(), "compacted up to the image before, at least the margin behind")

	// Nothing new: the newest image is returned, nothing written.
	again, err := n.cp.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, info.CRC, again.CRC)
	require.Equal(t, 2, n.cp.Status().Written)

	n.j.append(10)
	_, err = n.cp.Checkpoint(ctx)
	require.NoError(t, err)
	ids, _ := n.store.Indexes()
	require.Equal(t, []uint64{360, 350}, ids, "older images pruned after the journal recorded the new one")
	require.Equal(t, uint64(350), n.j.Compacted(), "the log starts after an image the store keeps")
}

func TestCheckpointThreshold(t *testing.T) {
	n := newNode(t, vfs.NewMem())
	n.j.append(99)
	n.clock.tick(time.Minute)
	r := <-n.ticks
	require.False(t, r.ran, "99 entries are below the threshold")
	n.j.append(1)
	n.clock.tick(time.Minute)
	r = <-n.ticks
	require.True(t, r.ran)
	require.NoError(t, r.err)
	require.Equal(t, uint64(100), r.info.Index)
	n.j.append(50)
	n.clock.tick(time.Minute)
	require.False(t, (<-n.ticks).ran, "50 entries past the image are below the threshold")
}

func TestCheckpointFailureIsRetriedAndReported(t *testing.T) {
	var logs logBuffer
	n := newNode(t, vfs.NewMem(), func(c *CheckpointerConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	n.j.append(150)
	n.j.FailImageWritten(errors.New("journal: disk full"))
	for i := 1; i <= 2; i++ {
		n.clock.tick(time.Minute)
		r := <-n.ticks
		require.True(t, r.ran, "a failed checkpoint is retried at the next interval")
		require.ErrorContains(t, r.err, "disk full", "attempt %d", i)
		st := n.cp.Status()
		require.Equal(t, i, st.Failures)
		require.ErrorContains(t, st.LastError, "disk full")
		require.Equal(t, n.clock.Now(), st.LastErrorAt)
	}
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "consecutive_failures=2")
	n.j.FailImageWritten(nil)
	n.clock.tick(time.Minute)
	r := <-n.ticks
	require.NoError(t, r.err)
	st := n.cp.Status()
	require.Zero(t, st.Failures)
	require.NoError(t, st.LastError)
	require.Equal(t, uint64(150), st.Last.Index)
	require.Equal(t, []uint64{150}, n.j.Images())
}

func TestCheckpointDisabledOnThisNode(t *testing.T) {
	enabled := false
	var mu sync.Mutex
	n := newNode(t, vfs.NewMem(), func(c *CheckpointerConfig) {
		c.Enabled = func() bool { mu.Lock(); defer mu.Unlock(); return enabled }
	})
	n.j.append(500)
	n.clock.tick(time.Minute)
	require.False(t, (<-n.ticks).ran)
	mu.Lock()
	enabled = true
	mu.Unlock()
	n.clock.tick(time.Minute)
	require.True(t, (<-n.ticks).ran)
}

// Checkpoints never overlap, however many are asked for at once.
func TestCheckpointOneAtATime(t *testing.T) {
	n := newNode(t, vfs.NewMem())
	n.j.append(100)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			n.j.append(10)
			_, err := n.cp.Checkpoint(context.Background())
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Equal(t, 1, n.j.MaxReadsInFlight())
	shadow := newKV()
	latest, err := n.store.Latest()
	require.NoError(t, err)
	_, err = n.store.loadInto(shadow, latest.Name, true)
	require.NoError(t, err)
	require.Equal(t, expectedKV(latest.Index), shadow.snapshot())
}

// Close stops a checkpoint in progress and waits for the goroutine (goleak
// in TestMain checks it is gone); nothing half-written is left.
func TestCheckpointerCloseCancels(t *testing.T) {
	fs := vfs.NewMem()
	n := newNode(t, fs)
	n.j.append(200)
	started := make(chan struct{}, 1)
	n.j.BlockReads(started)
	errc := make(chan error, 1)
	go func() { _, err := n.cp.Checkpoint(context.Background()); errc <- err }()
	<-started // the replay is under way
	require.NoError(t, n.cp.Close())
	require.ErrorIs(t, <-errc, context.Canceled)
	require.NoError(t, n.cp.Close(), "Close is idempotent")
	_, err := n.cp.Checkpoint(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	names, _ := fs.List("/data/image")
	require.ElementsMatch(t, []string{lockName}, names)
}

func TestCheckpointCallerCancels(t *testing.T) {
	n := newNode(t, vfs.NewMem())
	n.j.append(200)
	release := n.j.BlockReads(nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := n.cp.Checkpoint(ctx); errc <- err }()
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	release()
	info, err := n.cp.Checkpoint(context.Background())
	require.NoError(t, err, "the loop goes on after a cancelled request")
	require.Equal(t, uint64(200), info.Index)
}

// Images written at the same index on three nodes that applied the same
// entries are byte-identical.
func TestImagesIdenticalAcrossNodes(t *testing.T) {
	var files [][]byte
	for range 3 {
		n := newNode(t, vfs.NewMem())
		n.j.append(120)
		_, err := n.cp.Checkpoint(context.Background())
		require.NoError(t, err)
		n.j.append(80)
		info, err := n.cp.Checkpoint(context.Background())
		require.NoError(t, err)
		files = append(files, readAll(t, n.fs, "/data/image/"+info.Name))
	}
	require.Equal(t, files[0], files[1])
	require.Equal(t, files[0], files[2])
}

func TestCheckpointBaseCorruptFallsBackToJournal(t *testing.T) {
	n := newNode(t, vfs.NewMem())
	n.j.SetMargin(1000) // keep the whole log
	n.j.append(100)
	_, err := n.cp.Checkpoint(context.Background())
	require.NoError(t, err)
	corruptFile(t, n.fs, "/data/image/image.100")
	n.j.append(100)
	info, err := n.cp.Checkpoint(context.Background())
	require.NoError(t, err)
	shadow := newKV()
	_, err = n.store.loadInto(shadow, info.Name, true)
	require.NoError(t, err)
	require.Equal(t, expectedKV(200), shadow.snapshot())

	// Without the log behind them, corrupt bases fail loudly. The second
	// image compacts the log up to the first; both are corrupt.
	n2 := newNode(t, vfs.NewMem())
	for range 2 {
		n2.j.append(300)
		_, err = n2.cp.Checkpoint(context.Background())
		require.NoError(t, err)
	}
	require.Equal(t, uint64(300), n2.j.Compacted(), "the log starts after the first image")
	corruptFile(t, n2.fs, "/data/image/image.300")
	corruptFile(t, n2.fs, "/data/image/image.600")
	n2.j.append(10)
	_, err = n2.cp.Checkpoint(context.Background())
	require.ErrorIs(t, err, fakejournal.ErrCompacted)
	require.Equal(t, 1, n2.cp.Status().Failures)
}

// The journal's request for an image (Store.RequestImage, as
// journal.ImageRequester) makes the Store's running Checkpointer write one
// now, below the threshold and before any tick; with the Checkpointer
// closed the request is a no-op that does not block.
func TestStoreRequestImageCheckpointsNow(t *testing.T) {
	requested := make(chan tickResult, 4)
	n := newNode(t, vfs.NewMem(), func(c *CheckpointerConfig) {
		c.testingKnobs.afterRequested = func(info Info, err error) { requested <- tickResult{true, info, err} }
	})
	n.j.append(5) // far below the threshold of 100
	n.store.RequestImage()
	r := <-requested
	require.NoError(t, r.err)
	require.Equal(t, uint64(5), r.info.Index)
	require.Equal(t, []uint64{5}, n.j.Images(), "the journal was told")

	require.NoError(t, n.cp.Close())
	n.j.append(5)
	n.store.RequestImage() // no Checkpointer: nothing happens, nothing blocks
	ids, err := n.store.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{5}, ids)
}

package journal

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// tickClock is a Clock whose raft ticker (the one of period tick) the test
// drives; its time moves one tick per tick delivered. Other tickers and
// timers never fire: nothing else runs on time here.
type tickClock struct {
	tick  time.Duration
	tickc chan time.Time
	now   atomic.Int64 // nanoseconds since the epoch
}

func (c *tickClock) Now() time.Time { return time.Unix(0, c.now.Load()) }

func (c *tickClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	if d == c.tick {
		return c.tickc, func() {}
	}
	return nil, func() {}
}

func (c *tickClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	return nil, func() bool { return true }
}

func (c *tickClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

// gatedWALFS holds every fsync of a Pebble WAL file (the journal's synced
// writes: entries, term and vote), once on is set, until the test lets it
// through: a disk whose fsync takes as long as the test says.
type gatedWALFS struct {
	vfs.FS
	on      atomic.Bool
	started chan struct{} // a held fsync began
	release chan struct{} // let one through
	free    chan struct{} // closed: let every one through
}

type gatedWALFile struct {
	vfs.File
	fs *gatedWALFS
}

func (fs *gatedWALFS) hold() {
	if !fs.on.Load() {
		return
	}
	select {
	case fs.started <- struct{}{}:
	case <-fs.free:
		return
	}
	select {
	case <-fs.release:
	case <-fs.free:
	}
}

func (f gatedWALFile) Sync() error     { f.fs.hold(); return f.File.Sync() }
func (f gatedWALFile) SyncData() error { f.fs.hold(); return f.File.SyncData() }
func (f gatedWALFile) SyncTo(n int64) (bool, error) {
	f.fs.hold()
	return f.File.SyncTo(n)
}

func (fs *gatedWALFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gatedWALFile{File: f, fs: fs}, nil
}

func (fs *gatedWALFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *gatedWALFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

// TestSlowDiskDelaysElectionOfSoleVoter: a single voter whose every WAL
// fsync lasts three election timeouts (the test delivers that many raft
// ticks while it holds each one) still elects itself within its first
// few fsyncs: the time its own vote needs to become durable delays the
// election, it does not start it again.
func TestSlowDiskDelaysElectionOfSoleVoter(t *testing.T) {
	const (
		tick          = 7 * time.Millisecond // no other ticker has this period
		electionTicks = 10
	)
	fs := &gatedWALFS{FS: vfs.NewMem(), started: make(chan struct{}), release: make(chan struct{}), free: make(chan struct{})}
	var freeOnce sync.Once
	freeAll := func() { freeOnce.Do(func() { close(fs.free) }) }
	clk := &tickClock{tick: tick, tickc: make(chan time.Time)}
	clk.now.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	ticked := make(chan struct{}, 1)
	cfg := Config{
		ID: 1, Dir: "/n1", Addr: "n1", FS: fs, Bootstrap: true, Clock: clk,
		StateMachine: &orderSM{},
		TickInterval: tick, ElectionTicks: electionTicks, HeartbeatTicks: 1,
	}
	cfg.knobs = &testingKnobs{Ticked: func() { ticked <- struct{}{} }}
	j, err := Open(t.Context(), cfg)
	require.NoError(t, err)
	defer j.Close()
	defer freeAll() // before Close: a held fsync would keep it waiting
	fs.on.Store(true)

	tickOnce := func() {
		clk.tickc <- clk.Now()
		clk.now.Add(int64(tick))
		<-ticked
	}
	syncs := 0
	for !j.Status().IsLeader() {
		select {
		case <-fs.started:
			syncs++
			require.LessOrEqual(t, syncs, 4, "no leader after %d slow fsyncs: %+v", syncs-1, j.Status())
			for range 3 * electionTicks {
				tickOnce()
			}
			fs.release <- struct{}{}
		case clk.tickc <- clk.Now():
			clk.now.Add(int64(tick))
			<-ticked
		}
	}
	freeAll()
	require.LessOrEqual(t, j.Status().Term, uint64(2), "a campaign was started again while its vote was being written")
	require.NoError(t, j.Close())
}

package journal_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// crashFS is a crashable in-memory filesystem that counts the steps that
// change what a power cut leaves (creating, renaming, removing and linking
// files, creating directories, syncing files and directories) and, right
// before step `at`, keeps the state a power cut there would leave.
type crashFS struct {
	*vfs.MemFS
	mu      sync.Mutex
	steps   int
	at      int        // 0: never
	crashed *vfs.MemFS // the power cut's state, once taken
	onCrash func()     // called when it is taken
}

func (fs *crashFS) step() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.steps++
	if fs.steps == fs.at {
		fs.crashed = fs.MemFS.CrashClone(vfs.CrashCloneCfg{})
		if fs.onCrash != nil {
			fs.onCrash()
		}
	}
}

// cutNow cuts the power now unless that happened already (Open took fewer
// steps this time than when they were counted), and disarms the cut.
func (fs *crashFS) cutNow() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.at = -1
	if fs.crashed == nil {
		fs.crashed = fs.MemFS.CrashClone(vfs.CrashCloneCfg{})
		if fs.onCrash != nil {
			fs.onCrash()
		}
	}
}

func (fs *crashFS) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.steps
}

func (fs *crashFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return crashFile{File: f, fs: fs}, nil
}

func (fs *crashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.step()
	return fs.wrap(fs.MemFS.Create(name, c))
}

func (fs *crashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	fs.step()
	return fs.wrap(fs.MemFS.OpenReadWrite(name, c, o...))
}

func (fs *crashFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.step()
	return fs.wrap(fs.MemFS.ReuseForWrite(old, name, c))
}

func (fs *crashFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.MemFS.OpenDir(name)) }

func (fs *crashFS) Link(old, name string) error {
	fs.step()
	return fs.MemFS.Link(old, name)
}

func (fs *crashFS) Remove(name string) error {
	fs.step()
	return fs.MemFS.Remove(name)
}

func (fs *crashFS) RemoveAll(name string) error {
	fs.step()
	return fs.MemFS.RemoveAll(name)
}

func (fs *crashFS) Rename(old, name string) error {
	fs.step()
	return fs.MemFS.Rename(old, name)
}

func (fs *crashFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.step()
	return fs.MemFS.MkdirAll(dir, perm)
}

type crashFile struct {
	vfs.File
	fs *crashFS
}

func (f crashFile) Sync() error {
	f.fs.step()
	return f.File.Sync()
}

func (f crashFile) SyncData() error {
	f.fs.step()
	return f.File.SyncData()
}

func (f crashFile) SyncTo(n int64) (bool, error) {
	f.fs.step()
	return f.File.SyncTo(n)
}

// crashConfig is a fast-ticking node of a test network.
func crashConfig(net *journaltest.Network, id uint64, fs vfs.FS) journal.Config {
	addr := fmt.Sprintf("node%d", id)
	return journal.Config{
		ID: id, Dir: "/" + addr, Addr: addr, FS: fs,
		Transport:    net.Transport(addr),
		StateMachine: &journaltest.Recorder{},
		TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
	}
}

// openThenClose runs Open to its end (after the power cut the original
// process goes on, on a disk nobody will see again) and closes what it
// opened. A cut that Open did not reach comes right after it.
func openThenClose(t *testing.T, cfg journal.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := journal.Open(ctx, cfg)
	if fs, ok := cfg.FS.(*crashFS); ok && fs.at > 0 {
		fs.cutNow()
	}
	if err != nil {
		_ = cfg.Transport.Close()
		return
	}
	require.NoError(t, j.Close())
}

// A power cut at any step of a bootstrap leaves a data dir that opens
// again under the same configuration, leads and commits.
func TestCrashDuringBootstrap(t *testing.T) {
	// How many steps a bootstrap takes, up to Open's return.
	probe := &crashFS{MemFS: vfs.NewCrashableMem()}
	pcfg := crashConfig(journaltest.NewNetwork(1), 1, probe)
	pcfg.Bootstrap = true
	openThenClose(t, pcfg)
	steps := probe.count()
	require.Greater(t, steps, 5)
	for at := 1; at <= steps; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			net := journaltest.NewNetwork(1)
			fs := &crashFS{MemFS: vfs.NewCrashableMem(), at: at}
			cfg := crashConfig(net, 1, fs)
			cfg.Bootstrap = true
			openThenClose(t, cfg)
			require.NotNil(t, fs.crashed)

			cfg = crashConfig(net, 1, fs.crashed)
			cfg.Bootstrap = true
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			j, err := journal.Open(ctx, cfg)
			require.NoError(t, err, "reopen after a power cut before step %d of %d", at, steps)
			defer func() { require.NoError(t, j.Close()) }()
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
			defer pcancel()
			_, _, err = j.Propose(pctx, []byte("x"))
			require.NoError(t, err, "the restarted node leads and commits")
		})
	}
}

// A power cut at any step of a join leaves a data dir that opens again
// under the same configuration (joining again where the dir says nothing
// yet) and catches up with the cluster.
func TestCrashDuringJoin(t *testing.T) {
	probeCluster := journaltest.NewCluster(t, journaltest.Options{Voters: 1, TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1})
	probe := &crashFS{MemFS: vfs.NewCrashableMem()}
	cfg := crashConfig(probeCluster.Net, 2, probe)
	cfg.Join = "node1"
	openThenClose(t, cfg)
	steps := probe.count()
	require.Greater(t, steps, 5)
	probeCluster.Close()
	for at := 1; at <= steps; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1})
			// The power cut takes node 2 off the network at once: it
			// acknowledges nothing the cut state does not hold.
			fs := &crashFS{MemFS: vfs.NewCrashableMem(), at: at, onCrash: func() { c.Net.SetDown(2, true) }}
			cfg := crashConfig(c.Net, 2, fs)
			cfg.Join = "node1"
			openThenClose(t, cfg)
			require.NotNil(t, fs.crashed)

			c.Net.SetDown(2, false)
			cfg = crashConfig(c.Net, 2, fs.crashed)
			cfg.Join = "node1"
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			j, err := journal.Open(ctx, cfg)
			require.NoError(t, err, "reopen after a power cut before step %d of %d", at, steps)
			defer func() { require.NoError(t, j.Close()) }()
			idx, _, err := c.Node(1).Journal().Propose(ctx, []byte("x"))
			require.NoError(t, err)
			require.NoError(t, j.WaitApplied(ctx, idx), "the restarted node catches up")
			require.Contains(t, j.Status().Members, journal.Member{ID: 2, Addr: "node2", Role: journal.Follower, MaxVersion: journal.NewestVersion})
		})
	}
}

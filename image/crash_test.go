package image

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
)

// crasher injects a crash at the n-th filesystem write operation: it takes
// a crash clone of the underlying filesystem at that moment (what a power
// loss would leave: synced data, plus, with unsynced > 0, a random part of
// the rest), records what the journal had made durable, and fails that and
// every later operation, as a dead process would.
type crasher struct {
	mem      *vfs.MemFS
	at       int
	unsynced int
	rng      *rand.Rand
	snapshot func() uint64 // the journal's minIndex at the crash

	mu       sync.Mutex
	armed    bool
	count    int
	crashed  *vfs.MemFS
	minIndex uint64
}

func (c *crasher) MaybeError(op errorfs.Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
		if c.crashed != nil {
			return errorfs.ErrInjected
		}
		return nil
	}
	c.count++
	switch {
	case c.count == c.at:
		c.crashed = c.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: c.unsynced, RNG: c.rng})
		c.minIndex = c.snapshot()
		return errorfs.ErrInjected
	case c.count > c.at:
		return errorfs.ErrInjected
	}
	return nil
}

func (c *crasher) String() string { return "crasher" }

func (c *crasher) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = true
}

func (c *crasher) result() (*vfs.MemFS, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed, c.minIndex
}

// reopen opens a crashed data dir as a restarted node does, loads the newest
// usable image and replays the journal after it, and checks that the state
// holds every acknowledged write (entries 1..want).
func reopen(t *testing.T, fs vfs.FS, j *kvJournal, minIndex, want uint64) {
	t.Helper()
	st := newKV()
	s, err := Open(Config{Dir: "/data", FS: fs, State: st, ClusterID: "cluster-a", Logger: testLogger(t)})
	require.NoError(t, err, "the crashed data dir opens")
	defer s.Close()
	names, err := fs.List("/data/image")
	require.NoError(t, err)
	require.NotContains(t, names, ckptTmpName)
	require.NotContains(t, names, fetchTmpName)
	idx, _, err := s.LoadLatest(context.Background(), minIndex)
	require.NoError(t, err)
	require.GreaterOrEqual(t, idx, minIndex)
	require.NoError(t, j.ReadEntries(context.Background(), idx, want, func(i uint64, d []byte) error {
		st.Apply(i, d)
		return nil
	}))
	require.Equal(t, expectedKV(want), st.snapshot(), "every acknowledged write is there")
}

var crashVariants = []struct {
	name     string
	unsynced int
}{{"synced only", 0}, {"half of unsynced", 50}, {"all unsynced", 100}}

// A crash at every filesystem step of a checkpoint (write, sync, rename,
// directory sync, prune) leaves a data dir that opens with every
// acknowledged write.
func TestCrashDuringCheckpoint(t *testing.T) {
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			for step := 1; ; step++ {
				mem := vfs.NewCrashableMem()
				c := &crasher{mem: mem, at: step, unsynced: v.unsynced, rng: rand.New(rand.NewPCG(uint64(step), 1))}
				n := newNode(t, errorfs.Wrap(mem, c))
				c.snapshot = n.j.Compacted
				n.j.append(120)
				_, err := n.cp.Checkpoint(context.Background())
				require.NoError(t, err)
				n.j.append(30)
				n.j.append(0)
				// A second older image, so that the prune has work.
				_, err = n.cp.Checkpoint(context.Background())
				require.NoError(t, err)
				n.j.append(50)

				c.arm()
				_, cpErr := n.cp.Checkpoint(context.Background())
				crashed, minIndex := c.result()
				require.NoError(t, n.cp.Close())
				require.NoError(t, n.store.Close())
				if crashed == nil {
					require.NoError(t, cpErr)
					require.Greater(t, step, 5, "the checkpoint has several steps")
					t.Logf("crashed at each of %d filesystem steps", step-1)
					return
				}
				// (A crash in the prune after the image was recorded leaves
				// the checkpoint itself successful.)
				reopen(t, crashed, n.j, minIndex, 200)
			}
		})
	}
}

// A crash at every filesystem step of a restore (download, sync, rename,
// directory sync, install, prune) leaves a data dir that opens: before raft
// recorded the snapshot with the node's own image and log, after it with
// the fetched image.
func TestCrashDuringRestore(t *testing.T) {
	src := newPeer(t, 300, nil)
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			for step := 1; ; step++ {
				mem := vfs.NewCrashableMem()
				c := &crasher{mem: mem, at: step, unsynced: v.unsynced, rng: rand.New(rand.NewPCG(uint64(step), 1))}
				n := newNode(t, errorfs.Wrap(mem, c))
				c.snapshot = n.j.Compacted
				n.j.append(100)
				_, err := n.cp.Checkpoint(context.Background())
				require.NoError(t, err)
				n.j.append(50)
				require.NoError(t, n.cp.Close())

				c.arm()
				ctx := context.Background()
				err = n.store.Fetch(ctx, src.addr(), 300)
				want := uint64(150)
				if err == nil {
					// What the journal does next: raft records the snapshot
					// (its log now starts after 300), then applies it.
					n.j.InstallSnapshot(300)
					want = 300
					err = n.store.Install(ctx, 300)
				}
				crashed, minIndex := c.result()
				require.NoError(t, n.store.Close())
				if crashed == nil {
					require.NoError(t, err)
					require.Equal(t, expectedKV(300), n.live.snapshot())
					require.Greater(t, step, 5, "the restore has several steps")
					t.Logf("crashed at each of %d filesystem steps", step-1)
					return
				}
				reopen(t, crashed, n.j, minIndex, want)
			}
		})
	}
}

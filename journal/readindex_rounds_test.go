package journal_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// spyTransport wraps a node's transport: it keeps the Receiver the journal
// hands to Start, so that a test can deliver a message the network would
// have delivered late, and the request context of the last ReadIndex the
// node sent.
type spyTransport struct {
	journal.Transport
	mu      sync.Mutex
	recv    journal.Receiver
	readCtx []byte
}

func (s *spyTransport) Start(local uint64, r journal.Receiver) error {
	s.mu.Lock()
	s.recv = r
	s.mu.Unlock()
	return s.Transport.Start(local, r)
}

func (s *spyTransport) Send(msgs []*raftpb.Message) {
	s.mu.Lock()
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgReadIndex {
			s.readCtx = append([]byte(nil), m.GetEntries()[0].GetData()...)
		}
	}
	s.mu.Unlock()
	s.Transport.Send(msgs)
}

func (s *spyTransport) lastReadCtx() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readCtx
}

func (s *spyTransport) receiver() journal.Receiver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recv
}

// spies wraps every node's transport, a fresh one at each Open, and keeps
// the latest by node id.
type spies struct {
	mu sync.Mutex
	by map[uint64]*spyTransport
}

func (s *spies) configure(cfg *journal.Config) {
	sp := &spyTransport{Transport: cfg.Transport}
	cfg.Transport = sp
	s.mu.Lock()
	s.by[cfg.ID] = sp
	s.mu.Unlock()
}

func (s *spies) of(id uint64) *spyTransport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[id]
}

// barrierResult is what a ReadBarrier returned, and whether the state
// machine held the awaited entry at that moment.
type barrierResult struct {
	err     error
	covered bool
}

// barrierCovers runs a ReadBarrier on j and reports, at its return,
// whether sm had applied index want.
func barrierCovers(ctx context.Context, j *journal.Journal, sm *journaltest.Recorder, want uint64) <-chan barrierResult {
	out := make(chan barrierResult, 1)
	go func() {
		err := j.ReadBarrier(ctx)
		out <- barrierResult{err: err, covered: sm.LastIndex() >= want}
	}()
	return out
}

// A follower restarted while a leader's answer to a ReadIndex of its
// previous run is still on the way does not take that answer for one of
// its new rounds: the answer (an index from before a write the cluster
// acknowledged while the follower was down) arrives while the new round
// is in flight, and the barrier still returns only once the write is
// applied.
func TestReadBarrierIgnoresAnswersMeantForAPreviousRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := &spies{by: map[uint64]*spyTransport{}}
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters: 3,
			Configure: func(cfg *journal.Config) {
				cfg.StaleAfter = time.Hour
				sp.configure(cfg)
			},
		})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		f := leader%3 + 1

		// The previous run's round, and the index its answer carries.
		require.NoError(t, c.Node(f).Journal().ReadBarrier(ctx))
		oldCtx := sp.of(f).lastReadCtx()
		require.NotEmpty(t, oldCtx, "the follower sent a ReadIndex")
		oldIndex := c.Node(f).Journal().Status().Applied
		require.NoError(t, c.Stop(f))

		// A write acknowledged while the follower is down.
		idx, _, err := c.Node(leader).Journal().Propose(ctx, []byte("while-down"))
		require.NoError(t, err)
		require.Greater(t, idx, oldIndex)

		// The follower comes back cut off, so that its new round is not
		// answered, and the old answer arrives.
		c.Net.Isolate(f)
		require.NoError(t, c.Restart(ctx, f))
		n := c.Node(f)
		sm := n.StateMachine().(*journaltest.Recorder)
		require.Less(t, sm.LastIndex(), idx, "the restarted follower has not heard of the write")
		res := barrierCovers(ctx, n.Journal(), sm, idx)
		synctest.Wait()
		term := c.Node(leader).Journal().Status().Term
		late := &raftpb.Message{
			Type: raftpb.MsgReadIndexResp.Enum(), From: new(leader), To: new(f), Term: new(term),
			Index: new(oldIndex), Entries: []*raftpb.Entry{{Data: oldCtx}},
		}
		require.NoError(t, sp.of(f).receiver().Receive(ctx, []*raftpb.Message{late}))
		synctest.Wait()

		c.Net.Heal()
		r := <-res
		require.NoError(t, r.err)
		require.True(t, r.covered, "the barrier returned before the follower applied index %d, acknowledged before the barrier began", idx)
	})
}

// A barrier on a healthy cluster succeeds within a few round trips,
// whatever happened to the rounds before it: one lost in a 30 ms
// partition, or left unsent by callers whose context had ended. Twenty
// barriers in a row, each with a deadline of half the election timeout,
// all succeed on the leader and on a follower.
func TestReadBarrierSucceedsAfterLostOrAbandonedRounds(t *testing.T) {
	const (
		tick          = 10 * time.Millisecond
		electionTicks = 20
		deadline      = electionTicks * tick / 2
	)
	causes := []struct {
		name  string
		cause func(t *testing.T, c *journaltest.Cluster, id uint64)
	}{
		{"partition", func(t *testing.T, c *journaltest.Cluster, id uint64) {
			c.Net.Isolate(id)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, c.Node(id).Journal().ReadBarrier(ctx), context.DeadlineExceeded)
			c.Net.Heal()
		}},
		{"ended-context", func(t *testing.T, c *journaltest.Cluster, id uint64) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			for range 5 {
				require.ErrorIs(t, c.Node(id).Journal().ReadBarrier(ctx), context.Canceled)
			}
		}},
	}
	for _, cause := range causes {
		for _, via := range []string{"leader", "follower"} {
			t.Run(cause.name+"/via="+via, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					c := journaltest.NewCluster(t, journaltest.Options{
						Voters: 3, TickInterval: tick, ElectionTicks: electionTicks,
						Configure: func(cfg *journal.Config) { cfg.StaleAfter = time.Hour },
					})
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					leader, err := c.WaitLeader(ctx)
					require.NoError(t, err)
					id := leader
					if via == "follower" {
						id = leader%3 + 1
					}
					require.NoError(t, c.Node(id).Journal().ReadBarrier(ctx))
					cause.cause(t, c, id)
					synctest.Wait()
					now, err := c.WaitLeader(ctx)
					require.NoError(t, err)
					require.Equal(t, leader, now, "the cluster kept its leader")

					ok := 0
					for range 20 {
						bctx, bcancel := context.WithTimeout(t.Context(), deadline)
						if c.Node(id).Journal().ReadBarrier(bctx) == nil {
							ok++
						}
						bcancel()
					}
					require.Equal(t, 20, ok, "barriers with a deadline of %v that succeeded", deadline)
				})
			})
		}
	}
}

// slowSyncFS makes every sync take a while once armed: a disk whose
// fsync is slow, in the synctest bubble's virtual time.
type slowSyncFS struct {
	vfs.FS
	armed *atomic.Bool
	delay time.Duration
}

type slowSyncFile struct {
	vfs.File
	fs *slowSyncFS
}

func (fs *slowSyncFS) wait() {
	if fs.armed.Load() {
		<-time.After(fs.delay)
	}
}

func (fs *slowSyncFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return slowSyncFile{File: f, fs: fs}, nil
}

func (fs *slowSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *slowSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, o...))
}

func (fs *slowSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(old, name, c))
}

func (fs *slowSyncFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.FS.OpenDir(name)) }

func (f slowSyncFile) Sync() error     { f.fs.wait(); return f.File.Sync() }
func (f slowSyncFile) SyncData() error { f.fs.wait(); return f.File.SyncData() }
func (f slowSyncFile) SyncTo(n int64) (bool, error) {
	f.fs.wait()
	return f.File.SyncTo(n)
}

// With one voter, a ReadIndex the leader answers is at least every write
// it acknowledged, across a power cut: the sole voter acknowledges a write
// the observer (cut off) has not heard of, loses power, and comes back on
// a disk whose fsync is slow, with a commit index on disk below the write.
// A barrier on the observer, answered while the new leader's first entry
// is still being synced, and one on the leader itself, both cover the
// write.
func TestSoleVoterReadIndexCoversAcknowledgedWritesAfterACrash(t *testing.T) {
	for _, via := range []struct {
		name string
		id   uint64
	}{{"observer", 2}, {"leader", 1}} {
		t.Run("via="+via.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var slow atomic.Bool
				c := journaltest.NewCluster(t, journaltest.Options{
					Voters: 1, Observers: 1,
					Configure: func(cfg *journal.Config) {
						cfg.StaleAfter = time.Hour
						if cfg.ID == 1 {
							cfg.FS = &slowSyncFS{FS: cfg.FS, armed: &slow, delay: 50 * time.Millisecond}
						}
					},
				})
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				_, err := c.WaitLeader(ctx)
				require.NoError(t, err)
				const obs = 2
				require.NoError(t, c.Node(obs).Journal().ReadBarrier(ctx))

				c.Net.Isolate(obs)
				idx, _, err := c.Node(1).Journal().Propose(ctx, []byte("acknowledged"))
				require.NoError(t, err)
				require.NoError(t, c.Crash(1))
				c.Net.Heal()
				require.NoError(t, c.Restart(ctx, 1))
				// Slow from now on, not while pebble opens: it syncs holding
				// a mutex another of its goroutines waits for, which stops
				// the bubble's clock.
				slow.Store(true)

				n := c.Node(via.id)
				sm := n.StateMachine().(*journaltest.Recorder)
				require.Less(t, sm.LastIndex(), idx, "node %d has not applied the write yet", via.id)
				r := <-barrierCovers(ctx, n.Journal(), sm, idx)
				require.NoError(t, r.err)
				require.True(t, r.covered, "the barrier on node %d returned before it applied index %d, acknowledged before the barrier began", via.id, idx)
			})
		})
	}
}

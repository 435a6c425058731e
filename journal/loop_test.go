package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// gateSM blocks Apply while the gate is closed.
type gateSM struct {
	*memSM
	mu   sync.Mutex
	gate chan struct{}
}

// open lets Apply through; it is idempotent (a failed test's cleanup opens
// the gate so Close can stop the applier).
func (g *gateSM) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gateSM) Apply(index uint64, data []byte) any {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return g.memSM.Apply(index, data)
}

// A follower whose state machine is stuck keeps ticking, persisting and
// acknowledging once its apply queue is full: the leader, which needs it
// for a quorum, keeps committing, and nobody starts an election. Only the
// committed entries wait, and the queue stays within its bound.
func TestSlowApplyDoesNotStopRaft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(3, 0)
		leader := c.waitLeader()
		var slow, cut uint64
		for id := uint64(1); id <= 3; id++ {
			if id != leader {
				if slow == 0 {
					slow = id
				} else {
					cut = id
				}
			}
		}
		n := c.nodes[slow]
		gate := &gateSM{memSM: newMemSM(), gate: make(chan struct{})}
		t.Cleanup(gate.open) // before the cluster's cleanup closes the nodes
		n.closeJournal()
		n.sm = gate.memSM
		const queueBytes, perReady, entryBytes, entries = 4 << 10, 1 << 10, 512, 60
		require.NoError(t, c.open(n, func(cfg *Config) {
			cfg.StateMachine = gate
			cfg.ApplyQueueBytes, cfg.ApplyQueueBatches, cfg.MaxCommittedBytesPerReady = queueBytes, 4, perReady
		}))
		c.partition(cut) // the leader now needs the slow node for every commit
		term := c.nodes[leader].j.Status().Term
		for i := range entries {
			data := fmt.Appendf(make([]byte, 0, entryBytes), "s%d-", i)
			data = data[:entryBytes]
			_, _, err := c.nodes[leader].j.Propose(ctxT(t, 5*time.Second), data)
			require.NoError(t, err, "entry %d: the slow node still acknowledges", i)
		}
		require.True(t, n.j.applyq.full(), "the entries (%d bytes) filled the slow node's apply queue", entries*entryBytes)
		n.j.applyq.mu.Lock()
		queued := n.j.applyq.bytes
		batches := len(n.j.applyq.items)
		n.j.applyq.mu.Unlock()
		require.LessOrEqual(t, queued, uint64(queueBytes+perReady+2*(entryBytes+64)), "the queue stays within its bound")
		require.LessOrEqual(t, batches, 4)
		st := n.j.Status()
		require.Greater(t, st.Committed, st.Applied+uint64(queueBytes/entryBytes), "the slow node persisted entries it has not queued")
		lst := c.nodes[leader].j.Status()
		require.Equal(t, leader, lst.Leader)
		require.Equal(t, term, lst.Term, "no election while a follower's apply is stuck")
		require.Zero(t, n.j.campaigns.Load())
		gate.open()
		require.NoError(t, n.j.WaitApplied(ctxT(t, 5*time.Second), st.Committed))
		c.heal()
		require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
		last := fmt.Appendf(make([]byte, 0, entryBytes), "s%d-", entries-1)
		require.True(t, gate.has(string(last[:entryBytes])))
	})
}

func TestConfigValidation(t *testing.T) {
	sm := newMemSM()
	base := func() Config {
		return Config{ID: 1, Dir: t.TempDir(), Addr: "x:1", StateMachine: sm, Bootstrap: true}
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.ID = 0 }, "ID must be non-zero"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir is required"},
		{"no addr", func(c *Config) { c.Addr = "" }, "Addr is required"},
		{"no state machine", func(c *Config) { c.StateMachine = nil }, "StateMachine is required"},
		{"bootstrap and join", func(c *Config) { c.Join = "y:2" }, "exclusive"},
		{"observer bootstrap", func(c *Config) { c.Role = Observer }, "must be a Follower"},
		{"ticks", func(c *Config) { c.ElectionTicks, c.HeartbeatTicks = 2, 2 }, "ElectionTicks"},
		{"inflight", func(c *Config) { c.MaxInflightBytes = 10 }, "MaxInflightBytes"},
		{"stale", func(c *Config) { c.StaleAfter = time.Millisecond }, "StaleAfter"},
		{"margin", func(c *Config) { c.CompactMargin, c.DedupeWindow = 10, 20 }, "CompactMargin"},
		{"scheme", func(c *Config) { c.Scheme = "ftp" }, "Scheme"},
		{"entry larger than a frame", func(c *Config) { c.MaxEntryBytes = 8 << 20 }, "MaxEntryBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mod(&cfg)
			cfg.fillDefaults()
			err := cfg.validate()
			require.ErrorContains(t, err, tc.want)
		})
	}
	cfg := base()
	cfg.fillDefaults()
	require.NoError(t, cfg.validate())
	require.Equal(t, 100*time.Millisecond, cfg.TickInterval)
	require.Equal(t, 10, cfg.ElectionTicks)
	require.Equal(t, 30*time.Second, cfg.StaleAfter)
	require.Equal(t, uint64(20_000), cfg.CompactMargin)
}

// A membership version of a newer format is not malformed: it halts the
// applier rather than being skipped (journal/internal/envelope tests the
// envelope's kinds alike).
func TestMembershipCodec(t *testing.T) {
	_, err := decodeMembership([]byte(`{"v":99}`))
	require.ErrorIs(t, err, ErrUnknownVersion)
	_, err = decodeMembership([]byte(`nope`))
	require.ErrorIs(t, err, ErrMalformed)
}

// A proposer woken by fail (the loop or the applier stopped) leaves the
// waiter map with its answer: the applier resolving the same key afterwards
// (the rest of its batch) does not block on the full channel, and neither
// does Close, which waits for the applier.
func TestFailThenResolveDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &Journal{log: slog.New(slog.DiscardHandler)}
		j.mu.waiters = map[[16]byte]*waiter{}
		j.mu.appliedCh = make(chan struct{})
		key := [16]byte{4, 2}
		var w waiter
		j.addWaiter(key, &w)
		j.fail(errors.New("disk gone"))
		resolved := make(chan struct{})
		go func() {
			j.resolve(key, applyResult{index: 7})
			close(resolved)
		}()
		synctest.Wait()
		select {
		case <-resolved:
		default:
			t.Fatal("resolve blocked on a waiter fail already answered")
		}
		r := <-w.c
		require.ErrorIs(t, r.err, ErrClosed)
		require.ErrorContains(t, r.err, "disk gone")
		require.Zero(t, j.nwaiters.Load())
	})
}

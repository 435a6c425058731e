package journal_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/internal/logtest"
	"github.com/metatree/metatree/internal/metricstest"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// scrape gathers reg and returns each series' value by name: a gauge's or
// counter's value, a histogram's sample count.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return metricstest.Values(t, reg)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestCollectorExactValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1})
		ctx := ctxFor(t, 10*time.Second)
		j := c.Node(1).Journal()
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(j.Collector()))

		for i := range 3 {
			_, _, err := j.Propose(ctx, fmt.Appendf(nil, "v%d", i))
			require.NoError(t, err)
		}
		_, _, err := j.Propose(ctx, make([]byte, 2<<20))
		require.ErrorIs(t, err, journal.ErrTooLarge)
		require.NoError(t, j.ReadBarrier(ctx))

		got := scrape(t, reg)
		st := j.Status()
		require.Equal(t, 1.0, got["metatree_journal_has_leader"])
		require.Equal(t, 1.0, got["metatree_journal_is_leader"])
		require.Equal(t, 1.0, got["metatree_journal_leader_changes_total"], "one leader since start")
		require.Equal(t, float64(st.Term), got["metatree_journal_term"])
		require.Equal(t, float64(st.Applied), got["metatree_journal_applied_index"])
		require.Equal(t, float64(st.Committed), got["metatree_journal_committed_index"])
		require.Equal(t, 0.0, got["metatree_journal_stale"])
		require.Equal(t, 3.0, got["metatree_journal_proposals_applied_total"])
		require.Equal(t, 1.0, got["metatree_journal_proposals_failed_total"], "the oversized one")
		require.Equal(t, 0.0, got["metatree_journal_proposals_forwarded_total"])
		require.Equal(t, 0.0, got["metatree_journal_halted"])
		require.Equal(t, float64(journal.NewestVersion), got["metatree_journal_max_version"])
		require.Equal(t, 3.0, got["metatree_journal_apply_duration_seconds"], "one observation per applied user entry")
		require.Equal(t, 1.0, got["metatree_journal_read_barrier_duration_seconds"])
		require.Equal(t, 1.0, got["metatree_journal_read_index_rounds_total"], "one barrier, one round")
		require.Equal(t, 0.0, got["metatree_journal_loop_stalls_total"], "a loop that took every tick on time")
		require.Equal(t, 0.0, got["metatree_journal_refused_messages_total"])
		require.Equal(t, 0.0, got["metatree_journal_refused_peer_requests_total"])
		require.Greater(t, got["metatree_journal_wal_fsync_duration_seconds"], 0.0, "Pebble's histogram saw the synced appends")
	})
}

// A leader whose loop takes no tick for longer than an election timeout
// (a starved CPU, a paused process) loses its lead though every link
// holds, and counts the stall in metatree_journal_loop_stalls_total; the
// nodes whose loops ran on time count none.
func TestLoopStallCountedWhereTheLeadWasLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stall atomic.Uint64 // the node whose loop stalls at its next tick
		// The stalled loop waits until the others have elected a leader
		// without it: longer than an election timeout less a heartbeat
		// interval since its last tick.
		release := make(chan struct{})
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		defer free()
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
			id := cfg.ID
			journal.SetKnobsForTest(cfg, journal.KnobsForTest{Ticked: func() {
				if stall.CompareAndSwap(id, 0) {
					<-release
				}
			}})
		}})
		ctx := ctxFor(t, time.Minute)
		old, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		regs := map[uint64]*prometheus.Registry{}
		for id := uint64(1); id <= 3; id++ {
			regs[id] = prometheus.NewRegistry()
			require.NoError(t, regs[id].Register(c.Node(id).Journal().Collector()))
		}
		proposeVia(ctx, t, c.Node(old), "before")
		term := c.Node(old).Journal().Status().Term
		for id := uint64(1); id <= 3; id++ {
			require.Equal(t, 0.0, scrape(t, regs[id])["metatree_journal_loop_stalls_total"], "node %d, on time", id)
		}
		stall.Store(old)
		_, err = c.WaitNewLeader(ctx, old)
		require.NoError(t, err)
		free()
		awaitTicks(t, 5*bubbleElectionTicks, "the old leader steps down", func() bool {
			st := c.Node(old).Journal().Status()
			return st.State != journal.StateLeader && st.Term > term
		})
		for id := uint64(1); id <= 3; id++ {
			want := 0.0
			if id == old {
				want = 1
			}
			require.Equal(t, want, scrape(t, regs[id])["metatree_journal_loop_stalls_total"], "node %d", id)
		}
	})
}

func TestCollectorTwoJournalsTwoRegistries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{})
		ctx := ctxFor(t, 10*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		regs := map[uint64]*prometheus.Registry{}
		for _, id := range []uint64{leader, follower} {
			regs[id] = prometheus.NewRegistry()
			require.NoError(t, regs[id].Register(c.Node(id).Journal().Collector()))
		}
		// Nothing is registered globally: the same series from another
		// journal are refused on one registry, as duplicates.
		err = regs[leader].Register(c.Node(follower).Journal().Collector())
		require.True(t, errors.As(err, new(prometheus.AlreadyRegisteredError)), "got %v", err)

		idx, _, err := c.Node(follower).Journal().Propose(ctx, []byte("via follower"))
		require.NoError(t, err)
		// Propose returns once applied on the follower; the leader may apply
		// it a moment later.
		require.NoError(t, c.Node(leader).Journal().WaitApplied(ctx, idx))
		lg, fg := scrape(t, regs[leader]), scrape(t, regs[follower])
		require.Equal(t, 1.0, lg["metatree_journal_is_leader"])
		require.Equal(t, 0.0, fg["metatree_journal_is_leader"])
		require.Equal(t, 1.0, fg["metatree_journal_has_leader"])
		require.Equal(t, 1.0, fg["metatree_journal_proposals_forwarded_total"])
		require.Equal(t, 0.0, lg["metatree_journal_proposals_forwarded_total"])
		require.Equal(t, 1.0, lg["metatree_journal_proposals_applied_total"])
		require.Equal(t, 1.0, fg["metatree_journal_proposals_applied_total"])
	})
}

// creepClock is the bubble's clock whose every reading is a microsecond
// later than the one before: each duration the journal measures on it is
// at least that long, however fast the bubble runs the operation.
type creepClock struct {
	clock.Real
	reads atomic.Int64
}

func (c *creepClock) Now() time.Time {
	return c.Real.Now().Add(time.Duration(c.reads.Add(1)) * time.Microsecond)
}

// Five syncs and applies slower than their thresholds, within one
// rate-limit window, log one warning each.
func TestSlowOperationsWarnRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &logtest.Warnings{}
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, Logger: slog.New(w), Configure: func(cfg *journal.Config) {
			cfg.Clock = &creepClock{}
			cfg.SlowSync, cfg.SlowApply = time.Nanosecond, time.Nanosecond // everything is slow
		}})
		ctx := ctxFor(t, 10*time.Second)
		for i := range 5 {
			_, _, err := c.Node(1).Journal().Propose(ctx, fmt.Appendf(nil, "v%d", i))
			require.NoError(t, err)
		}
		require.Equal(t, 1, w.Count("apply took too long"))
		require.Equal(t, 1, w.Count("slow WAL sync"))
	})
}

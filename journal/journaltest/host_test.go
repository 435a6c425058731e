package journaltest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// callLog records the calls of every node's Hosts, in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, a...))
}

func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.calls
	l.calls = nil
	return out
}

type loggingHost struct {
	log *callLog
	id  uint64
}

func (h loggingHost) Started(_ context.Context, j *journal.Journal) error {
	h.log.add("started %d running=%v", h.id, j != nil)
	return nil
}

func (h loggingHost) Stop() error  { h.log.add("stop %d", h.id); return nil }
func (h loggingHost) Close() error { h.log.add("close %d", h.id); return nil }

// An unstarted cluster forms one start at a time; a power cut during node
// 1's bootstrap leaves it down and bootstrapping again at its next start;
// a Host sees each run begin and end in order.
func TestUnstartedClusterPowerCutAndHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log callLog
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters: 2, Unstarted: true,
			Host: func(_ context.Context, id uint64, cfg *journal.Config) (journaltest.Host, error) {
				log.add("open %d", id)
				return loggingHost{&log, id}, nil
			},
		})
		ctx := ctxFor(t, 30*time.Second)
		require.Len(t, c.Nodes(), 2)
		require.Empty(t, c.Running(), "no node starts with the cluster")

		err := c.RestartCrashingAt(ctx, 1, 1)
		require.ErrorIs(t, err, journaltest.ErrPowerCut)
		require.Nil(t, c.Node(1).Journal(), "down after the cut")
		require.Equal(t, []string{"open 1", "started 1 running=true", "stop 1", "close 1"}, log.take(),
			"the start went on on the lost disk, then the run ended")

		require.NoError(t, c.RestartCrashingAt(ctx, 1, 0), "node 1 bootstraps again")
		require.NoError(t, c.Restart(ctx, 2), "node 2 joins")
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		idx, _, err := c.Node(leader).Journal().Propose(ctx, []byte("formed"))
		require.NoError(t, err)
		require.NoError(t, c.WaitApplied(ctx, idx))
		require.Equal(t, []string{"open 1", "started 1 running=true", "open 2", "started 2 running=true"}, log.take())

		require.NoError(t, c.Stop(2))
		require.Equal(t, []string{"stop 2", "close 2"}, log.take())
		require.NoError(t, c.Restart(ctx, 2))
		require.NoError(t, c.Node(2).Journal().WaitApplied(ctx, idx))
		require.Contains(t, values(c.Node(2)), "formed", "node 2 restarted from its data dir")
		log.take()
		require.ErrorContains(t, c.Restart(ctx, 2), "is running")
	})
}

// RestartCrashingAt needs the in-memory filesystem.
func TestRestartCrashingAtOnDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, OnDisk: true, Unstarted: true})
		err := c.RestartCrashingAt(ctxFor(t, 30*time.Second), 1, 1)
		require.ErrorContains(t, err, "in-memory filesystem")
		require.NotErrorIs(t, err, journaltest.ErrPowerCut)
	})
}

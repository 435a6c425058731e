package heartbeat_test

import (
	"github.com/metatree/metatree/internal/logtest"
	"github.com/metatree/metatree/internal/metricstest"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/heartbeattest"
	"github.com/metatree/metatree/heartbeat/responder"
)

// scrape gathers c on a fresh registry: each series' value by name and
// labels (a histogram's sample count).
func scrape(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	return metricstest.Scrape(t, c)
}

func TestCollectorExactValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 2)
		leader, follower := c.frontends[1], c.frontends[2]
		got := scrape(t, leader.ms.Collector())
		require.Equal(t, 2.0, got["metatree_heartbeat_members{kind=frontend}{status=alive}"])
		require.Equal(t, 2.0, got["metatree_heartbeat_members{kind=worker}{status=alive}"])
		require.Equal(t, 0.0, got["metatree_heartbeat_members{kind=worker}{status=dead}"], "exists from the start")
		require.Equal(t, 0.0, got["metatree_heartbeat_members{kind=frontend}{status=dead}"])
		require.Equal(t, 0.0, got["metatree_heartbeat_missed_total"])
		require.Equal(t, 0.0, got["metatree_heartbeat_events_total{type=restarted}"])
		require.Equal(t, 4.0, got["metatree_heartbeat_events_total{type=added}"])

		c.restartWorker(10)
		c.advance(interval)
		c.net.cut("*", addrOf(11), true)
		c.advance(time.Duration(deadAfter+1) * interval)

		st := heartbeattest.StatsOf(leader.ms)
		for _, f := range []*frontend{leader, follower} {
			got = scrape(t, f.ms.Collector())
			require.Equal(t, 1.0, got["metatree_heartbeat_members{kind=worker}{status=alive}"], "frontend %d", f.id)
			require.Equal(t, 1.0, got["metatree_heartbeat_members{kind=worker}{status=dead}"], "frontend %d", f.id)
			require.Equal(t, 1.0, got["metatree_heartbeat_events_total{type=restarted}"], "frontend %d", f.id)
			require.Equal(t, 1.0, got["metatree_heartbeat_events_total{type=dead}"], "frontend %d", f.id)
		}
		got = scrape(t, leader.ms.Collector())
		require.GreaterOrEqual(t, st.Misses, uint64(deadAfter))
		require.Equal(t, float64(st.Misses), got["metatree_heartbeat_missed_total"])
		require.Equal(t, float64(st.Probes-st.Misses), got["metatree_heartbeat_rtt_seconds"], "one RTT per answered heartbeat")

		answers := leader.ms.Answers()
		require.Contains(t, answers, uint64(10))
		require.Equal(t, responder.DefaultVersion(), answers[10].Version)
		require.False(t, answers[10].Last.IsZero())
		require.Nil(t, follower.ms.Answers(), "only the leader heartbeats")
	})
}

// TestSlowRoundWarnsRateLimited: a member that never answers makes every
// round last the request timeout; the leader warns once per 10 s.
func TestSlowRoundWarnsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &logtest.Warnings{}
		c := newClusterWith(t, 1, 1, slog.New(w))
		require.Zero(t, w.Count("slow round"), "answered rounds are fast")
		c.net.slow(addrOf(10), interval) // answers after the timeout
		c.advance(5 * interval)
		require.Equal(t, 1, w.Count("slow round"))
		c.advance(10 * interval)
		require.Equal(t, 2, w.Count("slow round"))
	})
}

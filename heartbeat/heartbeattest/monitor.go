package heartbeattest

import (
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/internal/monitorstats"
)

// MonitorStats are the leader monitor's counters since heartbeat.New:
// whether it leads and in which term, the rounds and probes it ran, the
// heartbeats missed, the transitions journaled, the bytes of heartbeat
// bodies sent and received, and the duration of the last round.
type MonitorStats = monitorstats.Stats

// StatsOf returns the monitor counters of ms, for a test that waits for a
// round to run or a heartbeat to be missed.
func StatsOf(ms *heartbeat.Membership) MonitorStats { return monitorstats.Of(ms) }

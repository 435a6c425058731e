// Package monitorstats carries the leader monitor's counters from package
// heartbeat to its test kit, heartbeat/heartbeattest, without making them
// part of heartbeat's API: tests wait on them (a round ran, a heartbeat
// was missed), a host reads the metrics (Membership.Collector) instead.
//
// Package heartbeat sets Of when it is initialized; nothing else writes it.
// The package owns no goroutines.
package monitorstats

import "time"

// Stats are the leader monitor's counters since heartbeat.New.
type Stats struct {
	Leading     bool
	Term        uint64
	Rounds      uint64
	Probes      uint64
	Misses      uint64
	Transitions uint64 // transitions journaled
	BytesSent   uint64 // heartbeat request bodies
	BytesRecv   uint64 // heartbeat response bodies
	LastRound   time.Duration
}

// Of returns the counters of membership, a *heartbeat.Membership. Package
// heartbeat sets it in its init.
var Of func(membership any) Stats

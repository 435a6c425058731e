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

// Package monitorstats carries the leader monitor's counters from package
// heartbeat to its test kit, heartbeat/heartbeattest, without making them
// part of heartbeat's API: tests wait on them (a round ran, a heartbeat
// was missed), a host reads the metrics (Membership.Collector) instead.
//
// Package heartbeat sets Of when it is initialized; nothing else writes it.
// The package owns no goroutines.
package monitorstats

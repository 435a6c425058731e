// Package heartbeattest holds what tests of other packages need of the
// heartbeat and nothing a host needs: the temporary epoch the cluster
// publishes for a dead member (TemporaryEpoch), to build the events a
// frontend or a worker would deliver, and the leader monitor's counters
// (StatsOf), to wait for a round or a missed heartbeat.
//
// It is for tests only. It owns no goroutines and keeps no state.
package heartbeattest

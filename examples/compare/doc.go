// Command compare runs one replicated-write workload against metatree's
// journal and against the two things a Go service would otherwise embed:
// the etcd server (go.etcd.io/etcd/server/v3/embed, through v3client) and
// hashicorp/raft with raft-boltdb. Each system runs 3 members in this one
// process with fsync on; -clients goroutines on the leader each write
// 256-byte values (or, with -mode read, make linearizable reads on a
// follower) until -ops operations are done. The systems take turns in
// -rounds rounds, one after another, each round on fresh data dirs under -dir,
// so that a drift of the machine's speed hits all of them alike; the
// disk's fsync p50 is measured before every round. With -warmup N, every
// system first takes N writes to keys of its own, untimed, so that the
// timed operations meet a long-running cluster's state (memory grown and
// recycled, files past their first sizes) rather than each system's
// start-up.
//
//	go -C examples/compare run . -mode write -ops 50000 -warmup 200000 -clients 64 -rounds 3
//	go -C examples/compare run . -mode read -ops 200000 -clients 64 -rounds 3
//
// Each line also states the disk a member's data dir occupies at the end
// of the run (allocated blocks, preallocated space included): with a few
// writes (-ops 10 -clients 1 -rounds 1), the disk an idle member takes.
//
// It prints one line per system and round, then each system's means and
// metatree's ratios to the others (writes/s, and p99 as a fraction of
// theirs). It is a nested module so that the library's go.mod does not
// depend on what it compares against.
package main

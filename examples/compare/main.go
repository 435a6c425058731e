// Command compare runs one replicated-write workload against metatree's
// journal and against the two things a Go service would otherwise embed:
// the etcd server (go.etcd.io/etcd/server/v3/embed, through v3client) and
// hashicorp/raft with raft-boltdb. Each system runs 3 members in this one
// process with fsync on; -clients goroutines on the leader each write
// 256-byte values (or, with -mode read, make linearizable reads on a
// follower) until -ops operations are done. The systems take turns in
// -rounds rounds, one after another, each round on fresh data dirs under -dir,
// so that a drift of the machine's speed hits all of them alike; the
// disk's fsync p50 is measured before every round.
//
//	go -C examples/compare run . -mode write -ops 200000 -clients 64 -rounds 3
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

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var cfg workload
	flag.IntVar(&cfg.ops, "ops", 20000, "operations per system and round")
	flag.IntVar(&cfg.clients, "clients", 64, "concurrent writers (or readers) per system")
	flag.IntVar(&cfg.size, "size", 256, "value bytes per write")
	flag.IntVar(&cfg.keys, "keys", 100000, "key space: operation i writes key i % keys")
	rounds := flag.Int("rounds", 3, "interleaved rounds; each round runs every system once")
	mode := flag.String("mode", "write", "write: values written on the leader; read: linearizable reads on a follower")
	dir := flag.String("dir", os.TempDir(), "parent of the fresh data dirs (removed after each run); pass a dir on the disk to measure")
	only := flag.String("systems", "metatree,etcd,hraft", "comma-separated systems to run")
	timeout := flag.Duration("timeout", 30*time.Minute, "abort after this long")
	flag.Parse()

	switch *mode {
	case "write":
	case "read":
		cfg.read = true
	default:
		fail(fmt.Errorf("-mode %q: want write or read", *mode))
	}
	if err := cfg.validate(); err != nil {
		fail(err)
	}
	if *rounds < 1 {
		fail(fmt.Errorf("-rounds %d: want at least 1", *rounds))
	}
	systems, err := selectSystems(*only)
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, cfg, systems, *rounds, *dir, os.Stdout); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

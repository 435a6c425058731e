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
	flag.IntVar(&cfg.warmup, "warmup", 0, "writes every system takes, untimed and to keys of their own, before the timed operations (a long-running cluster's state)")
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

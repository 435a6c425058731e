package main

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/metatree/metatree/examples/internal/sim"
)

func main() {
	testing.Init()
	seeds := flag.Int("seeds", 0, "number of seeds to run")
	duration := flag.Duration("duration", 0, "run seeds until this much wall-clock time has passed")
	seed := flag.Uint64("seed", 0, "run this one seed (a replay)")
	from := flag.Uint64("from", 0, "first seed of -seeds or -duration (default: drawn from the clock)")
	simulated := flag.Duration("simulated", sim.DefaultDuration, "simulated time of faults per seed")
	trace := flag.Bool("v", false, "trace every fault as it happens")
	flag.Parse()
	set := 0
	for _, on := range []bool{*seeds > 0, *duration > 0, *seed != 0} {
		if on {
			set++
		}
	}
	if set != 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: sim -seeds N | -duration D | -seed S [-from S] [-simulated D] [-v]")
		os.Exit(2)
	}
	first := *from
	if first == 0 {
		first = uint64(time.Now().UnixNano())
	}
	out := os.Stdout
	os.Stdout = os.Stderr // the testing package's own lines
	began := time.Now()
	more := func(n int) bool {
		switch {
		case *seed != 0:
			return n < 1
		case *seeds > 0:
			return n < *seeds
		}
		return time.Since(began) < *duration
	}
	simulate := func(t *testing.T) {
		ran, failed := 0, 0
		var total time.Duration
		for n := 0; more(n); n++ {
			opts := sim.Options{Seed: first + uint64(n), Duration: *simulated}
			if *seed != 0 {
				opts.Seed = *seed
			}
			if *trace {
				opts.Trace = func(s string) { fmt.Fprintln(out, s) }
			}
			var res *sim.Result
			t.Run(fmt.Sprintf("seed=%d", opts.Seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { res = sim.Run(t, opts) })
			})
			ran++
			switch {
			case res == nil:
				failed++
				fmt.Fprintf(out, "seed %d: FAILED in set-up (see stderr)\n  replay: go run ./examples/sim -seed %d\n", opts.Seed, opts.Seed)
			case res.Failed():
				failed++
				total += res.Simulated
				fmt.Fprintln(out, res.Report())
			default:
				total += res.Simulated
				fmt.Fprintln(out, res.Report())
			}
		}
		fmt.Fprintf(out, "sim: seeds=%d failed=%d simulated=%.2f h wall=%.0f s\n", ran, failed, total.Hours(), time.Since(began).Seconds())
		if failed > 0 {
			t.Fail()
		}
	}
	testing.Main(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "Simulate", F: simulate}}, nil, nil)
}

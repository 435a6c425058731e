package sim

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quickSeeds are the seeds the plain test run checks (a few seconds).
var quickSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8}

// runSeed runs one seed in its own bubble as a subtest and returns its
// result.
func runSeed(t *testing.T, opts Options) *Result {
	var res *Result
	t.Run(fmt.Sprintf("seed=%d", opts.Seed), func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res = Run(t, opts)
		})
		if res == nil {
			return // set-up failed t
		}
		if res.Failed() {
			t.Error(res.Report())
		} else {
			t.Log(res.Report())
		}
	})
	return res
}

// TestSimulatedSeedsPassEveryCheck runs quickSeeds; with
// METATREE_SIM_SEED, that one seed; with METATREE_SIM_SECONDS, as many
// seeds from a random start as fit in that many wall-clock seconds.
func TestSimulatedSeedsPassEveryCheck(t *testing.T) {
	if s := os.Getenv("METATREE_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("METATREE_SIM_SEED=%q: %v", s, err)
		}
		runSeed(t, Options{Seed: seed, Trace: func(s string) { t.Log(s) }})
		return
	}
	if s := os.Getenv("METATREE_SIM_SECONDS"); s != "" {
		secs, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("METATREE_SIM_SECONDS=%q: %v", s, err)
		}
		deadline := time.Now().Add(time.Duration(secs) * time.Second)
		for seed := uint64(time.Now().UnixNano()); time.Now().Before(deadline); seed++ {
			runSeed(t, Options{Seed: seed})
		}
		return
	}
	for _, seed := range quickSeeds {
		runSeed(t, Options{Seed: seed})
	}
}

// BenchmarkSimulatedClusterHours reports how many hours of one simulated
// cluster's life (set-up, faults and checks) a wall-clock minute runs.
// synctest.Test needs a *testing.T, which a benchmark lacks: each
// iteration runs one seed as a test through testing.RunTests.
func BenchmarkSimulatedClusterHours(b *testing.B) {
	var simulated time.Duration
	seed := uint64(1)
	began := time.Now()
	for b.Loop() {
		opts := Options{Seed: seed}
		seed++
		ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
			Name: fmt.Sprintf("seed=%d", opts.Seed),
			F: func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					res := Run(t, opts)
					simulated += res.Simulated
					if res.Failed() {
						t.Error(res.Report())
					}
				})
			},
		}})
		if !ok {
			b.Fatalf("seed %d failed", opts.Seed)
		}
	}
	b.ReportMetric(simulated.Hours()/time.Since(began).Minutes(), "cluster-h/min")
}

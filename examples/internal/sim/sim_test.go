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

// quickSeeds are the seeds the plain test run checks.
var quickSeeds = []uint64{1, 2, 3}

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
		runSeed(t, Options{Seed: seed})
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

package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/journal"
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

// A replica whose catalog differs (one attribute changed outside the log
// on one frontend) fails the run's checks: the alarm check names it. The
// checks that pass on every other seed can fail.
func TestRunReportsAReplicaWhoseCatalogDiffers(t *testing.T) {
	const corrupt = 2
	// Seed 2 draws no operator recovery (drawDisaster): a recovery forced
	// from the corrupted member makes a history porcupine takes too long
	// to judge, and the corruption is to be the run's only defect.
	const seed = 2
	require.Empty(t, drawDisaster(seed, 3, time.Now(), 20*time.Second).kind)
	res := runCorrupted(t, Options{Seed: seed, Frontends: 3, Duration: 20 * time.Second, Extend: func(ctx context.Context, c *frontendtest.Cluster, _ *rand.Rand) {
		f := c.Frontend(corrupt)
		if err := f.Journal().ReadBarrier(ctx); err != nil {
			t.Fatalf("read barrier on frontend %d: %v", corrupt, err)
		}
		if err := catalogtest.SetAttr(f.Tree(), "/kv", "flipped", catalog.Int(1)); err != nil {
			t.Fatalf("changing frontend %d's catalog: %v", corrupt, err)
		}
		for !errors.Is(f.Journal().Status().Err, journal.ErrCorrupt) {
			select {
			case <-ctx.Done():
				t.Fatalf("frontend %d never raised the corruption alarm: %v", corrupt, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}})
	require.True(t, res.Failed(), "a run with a corrupted replica passed")
	require.Contains(t, strings.Join(res.Failures, "\n"), "alarm")
}

// runCorrupted runs opts in a bubble and returns its result, which the
// caller expects to have failed.
func runCorrupted(t *testing.T, opts Options) *Result {
	var res *Result
	synctest.Test(t, func(t *testing.T) {
		res = Run(t, opts)
	})
	require.NotNil(t, res)
	return res
}

// A cluster that declares a member dead only after twenty missed
// heartbeats cancels a stopped worker's queries later than the README's
// bound of four intervals: the bound check names them. A stop is held to
// the bound only where the cluster could act on it throughout, which
// some runs' faults never leave room for: the test runs seeds until one
// reports it, as the simulator's long runs do.
func TestRunReportsQueriesCancelledLaterThanTheBound(t *testing.T) {
	var reports []string
	for seed := uint64(1); seed <= 12; seed++ {
		res := runCorrupted(t, Options{Seed: seed, Frontends: 3, Duration: time.Minute, Configure: func(c *frontend.Config) { c.DeadAfter = 20 }})
		if strings.Contains(strings.Join(res.Failures, "\n"), "stopped at") {
			return
		}
		reports = append(reports, res.Report())
	}
	t.Fatalf("no run of a cluster whose deaths come late failed the bound:\n%s", strings.Join(reports, "\n"))
}

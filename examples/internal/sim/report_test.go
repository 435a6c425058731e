package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReportListsTheFirstFailures: a run with many failures reports the
// first reportedFailures of them, how many more there were, and the replay.
func TestReportListsTheFirstFailures(t *testing.T) {
	r := &Result{Seed: 7}
	for i := range reportedFailures + 5 {
		r.Failures = append(r.Failures, fmt.Sprintf("failure %d", i))
	}
	rep := r.Report()
	require.Contains(t, rep, fmt.Sprintf("failure %d\n", reportedFailures-1))
	require.NotContains(t, rep, fmt.Sprintf("failure %d\n", reportedFailures))
	require.Contains(t, rep, "… and 5 more failures")
	require.True(t, strings.HasSuffix(rep, "replay: go run ./examples/sim -seed 7"), rep)
}

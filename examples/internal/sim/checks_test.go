package sim

import (
	"errors"
	"fmt"
	"testing"
)

// TestImageCheckRunsAgainWhenTheLogMovesUnderIt runs a differential check
// again while a checkpoint compacts the log under it, and fails the run
// on any other error, or when the log keeps moving.
func TestImageCheckRunsAgainWhenTheLogMovesUnderIt(t *testing.T) {
	moved := fmt.Errorf("replay: %w", errMovedUnder)
	for _, c := range []struct {
		name  string
		errs  []error
		fails bool
		runs  int
	}{
		{"passes", []error{nil}, false, 1},
		{"moved twice, then passes", []error{moved, moved, nil}, false, 3},
		{"another error", []error{errors.New("digests differ")}, true, 1},
		{"moved, then another error", []error{moved, errors.New("digests differ")}, true, 2},
		{"always moved", []error{moved, moved, moved, moved, moved, moved}, true, maxImageChecks},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &run{}
			runs := 0
			r.retryImageCheck(1, func() error {
				runs++
				return c.errs[runs-1]
			})
			if got := len(r.failures) > 0; got != c.fails {
				t.Errorf("failed %v, want %v (%v)", got, c.fails, r.failures)
			}
			if runs != c.runs {
				t.Errorf("ran the check %d times, want %d", runs, c.runs)
			}
		})
	}
}

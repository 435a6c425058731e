package journaltest

import (
	"context"
	"fmt"

	"github.com/metatree/metatree/journal"
)

// AwaitLeading waits until j leads, woken by its leadership changes
// (journal.Journal.Leadership), or fails with ctx's error and j's status
// once ctx ends.
func AwaitLeading(ctx context.Context, j *journal.Journal) error {
	for {
		ch := j.Leadership()
		if j.Status().IsLeader() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			st := j.Status()
			return fmt.Errorf("journaltest: node %d does not lead (%+v): %w", st.ID, st, ctx.Err())
		}
	}
}

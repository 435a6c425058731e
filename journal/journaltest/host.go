package journaltest

import (
	"context"

	"github.com/metatree/metatree/journal"
)

// A Host is what runs beside one run of a node's journal, as a host
// process wires its own components around it (an image store and its
// checkpointer, say). Options.Host makes one for each run, before
// journal.Open, from the node's Config, which it may adjust (set
// Snapshots, say, on cfg.FS). A Cluster calls its methods in order:
// Started once journal.Open returned; when the run ends, Stop, then the
// journal closes, then Close. If journal.Open fails, only Close runs.
type Host interface {
	// Started runs once journal.Open returned j; an error ends the run.
	Started(ctx context.Context, j *journal.Journal) error
	// Stop runs before the journal closes: it stops what uses the journal.
	Stop() error
	// Close runs after the journal closed: it releases what the journal
	// used.
	Close() error
}

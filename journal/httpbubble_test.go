package journal_test

import (
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// httpBubble is a journaltest.Cluster on journal's HTTP transport served
// in process (journaltest.HTTPInProcess), for the tests in synctest
// bubbles that exercise the transport itself or reach a node's internals
// through export_test.go. Every node has the token "secret". On top of
// the cluster it cuts links at the transports' drop hook and adjusts the
// Config of one start of a node.
type httpBubble struct {
	*journaltest.Cluster

	mu       sync.Mutex
	isolated map[uint64]bool                      // nodes cut off from every other
	cut      map[[2]uint64]bool                   // dropped directions (from, to)
	mod      map[uint64]func(cfg *journal.Config) // of each node's next start
	// images, if set, gives every node its fakeImages and the window
	// (which a start's mod may change), bound at each start after the
	// other adjustments.
	images *bubbleImages
}

// newHTTPBubble starts a cluster as journaltest.NewCluster does, with
// opts on the in-process HTTP transport; opts.Configure runs before the
// adjustment of a start (start, restart). Set JOURNAL_TEST_LOG to see the
// nodes' logs.
func newHTTPBubble(t *testing.T, opts journaltest.Options) *httpBubble {
	t.Helper()
	return startHTTPBubble(t, opts, nil)
}

// newImageBubble is newHTTPBubble with images for every node, of
// CompactMargin and DedupeWindow window; the nodes' state machines are
// memSMs unless opts.NewStateMachine says otherwise.
func newImageBubble(t *testing.T, opts journaltest.Options, window uint64) (*httpBubble, *bubbleImages) {
	t.Helper()
	imgs := newBubbleImages(window)
	return startHTTPBubble(t, opts, imgs), imgs
}

func startHTTPBubble(t *testing.T, opts journaltest.Options, images *bubbleImages) *httpBubble {
	t.Helper()
	b := &httpBubble{images: images, isolated: map[uint64]bool{}, cut: map[[2]uint64]bool{}, mod: map[uint64]func(*journal.Config){}}
	configure := opts.Configure
	opts.Transport = journaltest.HTTPInProcess
	if images != nil && opts.NewStateMachine == nil {
		opts.NewStateMachine = func(uint64) journal.StateMachine { return newMemSM() }
	}
	if os.Getenv("JOURNAL_TEST_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts.Configure = func(cfg *journal.Config) {
		cfg.Token = "secret"
		cfg.StaleAfter = 300 * time.Millisecond
		cfg.Transport.(*journal.HTTPTransport).SetDropForTest(b.dropped)
		if configure != nil {
			configure(cfg)
		}
		b.mu.Lock()
		mod := b.mod[cfg.ID]
		b.mu.Unlock()
		if b.images != nil {
			cfg.CompactMargin, cfg.DedupeWindow = b.images.window, b.images.window
		}
		if mod != nil {
			mod(cfg)
		}
		if b.images != nil {
			// After mod, which may replace the state machine.
			b.images.of(cfg.ID).bind(cfg)
		}
	}
	b.Cluster = journaltest.NewCluster(t, opts)
	return b
}

func (b *httpBubble) dropped(from, to uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.isolated[from] || b.isolated[to] || b.cut[[2]uint64{from, to}]
}

// partition cuts node id off from every other node, both ways, those
// added later included.
func (b *httpBubble) partition(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.isolated[id] = true
}

// cutOneWay drops what from sends to to, and nothing the other way.
func (b *httpBubble) cutOneWay(from, to uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut[[2]uint64{from, to}] = true
}

// heal undoes every cut.
func (b *httpBubble) heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.isolated)
	clear(b.cut)
}

// restart starts node id (down) again with a fresh state machine, its
// Config adjusted by mod (nil: none) for this start only, and returns
// Open's error.
func (b *httpBubble) restart(t *testing.T, id uint64, mod func(cfg *journal.Config)) error {
	t.Helper()
	defer b.modNextStart(id, mod)()
	return b.Restart(ctxFor(t, 30*time.Second), id)
}

// add starts the next node with role, joining through the lowest-numbered
// running node, its Config adjusted by mod (nil: none) for this start
// only; the node stays in the cluster, down, if Open fails.
func (b *httpBubble) add(t *testing.T, role journal.Role, mod func(cfg *journal.Config)) (*journaltest.Node, error) {
	t.Helper()
	id := uint64(len(b.Nodes()) + 1)
	defer b.modNextStart(id, mod)()
	return b.AddNode(ctxFor(t, 30*time.Second), role)
}

// modNextStart makes mod (nil: none) adjust node id's Config at its next
// start; the start is over when the returned func is called, which drops
// mod.
func (b *httpBubble) modNextStart(id uint64, mod func(cfg *journal.Config)) (started func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mod[id] = mod
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.mod, id)
	}
}

// stop closes node id's journal and fails the test on an error.
func (b *httpBubble) stop(t *testing.T, id uint64) {
	t.Helper()
	require.NoError(t, b.Stop(id), "stop node %d", id)
}

// leader waits until every running node follows one leader, within 10 s
// of the bubble's time, and returns its node.
func (b *httpBubble) leader(t *testing.T) *journaltest.Node {
	t.Helper()
	id, err := b.WaitLeader(ctxFor(t, 10*time.Second))
	require.NoError(t, err)
	awaitTicks(t, 1000, "every node follows the leader", func() bool {
		for _, n := range b.Running() {
			if j := n.Journal(); j != nil && j.Status().Leader != id {
				return false
			}
		}
		return true
	})
	return b.Node(id)
}

package journal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadsAfterCloseWrapErrClosed: every read of a closed journal's log
// fails with the journal's own ErrClosed, not a store's private sentinel a
// caller cannot name.
func TestReadsAfterCloseWrapErrClosed(t *testing.T) {
	c := newCluster(t)
	c.start(1, 0)
	n := c.nodes[1]
	idx := propose(t, n, "v")
	j := n.j
	n.closeJournal()

	_, err := j.TermAt(idx)
	require.ErrorIs(t, err, ErrClosed, "TermAt")
	err = j.ReadEntries(ctxT(t, time.Second), 0, idx, func(uint64, []byte) error { return nil })
	require.ErrorIs(t, err, ErrClosed, "ReadEntries")
	_, err = j.FirstIndex()
	require.ErrorIs(t, err, ErrClosed, "FirstIndex")
	_, err = ImageLogOf(j).MembershipAt(idx)
	require.ErrorIs(t, err, ErrClosed, "MembershipAt")
}

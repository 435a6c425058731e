package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
)

// A frontend the leader's membership no longer holds (removed: its
// process may still run, as the removal probe restarts it) or does not
// hold yet receives no entry, so it learns of no worker's change: the
// ground truth does not count its links clean, and a query it coordinates
// is not held to the cancellation bound.
func TestFrontendsOutsideTheMembershipAreNotClean(t *testing.T) {
	ms := []journal.Member{{ID: 1}, {ID: 2}, {ID: 3, Role: journal.Observer}}
	require.Equal(t, []uint64{4, 8}, outside([]int{1, 2, 3, 4, 8}, ms))
	require.Empty(t, outside([]int{1, 2, 3}, ms))
}

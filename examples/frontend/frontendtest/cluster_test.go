package frontendtest

import (
	"context"
	"testing"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/stretchr/testify/require"
)

func TestWriteThroughAFollowerIsReadLinearizablyOnAnother(t *testing.T) {
	c := NewCluster(t, Options{Frontends: 3})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	leader, err := c.Leader(ctx)
	require.NoError(t, err)
	var followers []int
	for i := 1; i <= 3; i++ {
		if i != leader {
			followers = append(followers, i)
		}
	}
	_, err = c.Frontend(followers[0]).Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/orders", Kind: "table", Cond: catalog.Cond{Absent: true}},
	}})
	require.NoError(t, err)
	other := c.Frontend(followers[1])
	require.NoError(t, other.Journal().ReadBarrier(ctx))
	n, ok := other.Tree().Get("/orders")
	require.True(t, ok)
	require.Equal(t, "table", n.Kind)
}

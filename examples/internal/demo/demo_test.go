package demo

import (
	"errors"
	"testing"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunsRestartAnEndedID: an id in use by a running run is refused; one
// whose run ended, by cancellation or as a refusal recorded without a run,
// runs again, as a coordinator retrying a query whose dispatch failed needs.
func TestRunsRestartAnEndedID(t *testing.T) {
	reg := cancel.New(cancel.Config{})
	defer reg.Close()
	coordinator := cancel.Member{Node: 1, Epoch: epoch.New()}
	query := func() *cancel.Query {
		q, err := reg.Register(t.Context(), coordinator, nil)
		require.NoError(t, err)
		return q
	}
	rs := NewRuns()
	defer rs.Close()
	state := func(id string) string {
		v, _ := rs.Get(id)
		return v.State
	}

	require.NoError(t, rs.Start("q", RunView{Query: "q"}, query(), time.Hour, nil))
	require.ErrorIs(t, rs.Start("q", RunView{Query: "q"}, query(), time.Hour, nil), ErrExists, "a running id")
	require.True(t, rs.Cancel("q", errors.New("withdrawn")))
	require.Eventually(t, func() bool { return state("q") == Cancelled }, 5*time.Second, time.Millisecond)
	require.NoError(t, rs.Start("q", RunView{Query: "q"}, query(), time.Hour, nil), "an id whose run was cancelled")
	require.Equal(t, Running, state("q"))

	rs.Record("refused", RunView{Query: "refused", State: Cancelled, Cause: "coordinator gone"})
	require.Equal(t, Cancelled, state("refused"))
	require.NoError(t, rs.Start("refused", RunView{Query: "refused"}, query(), time.Hour, nil), "an id recorded as refused")
	require.Equal(t, Running, state("refused"))
	rs.Record("refused", RunView{Query: "refused", State: Cancelled})
	require.Equal(t, Running, state("refused"), "a record never replaces a running run")
}

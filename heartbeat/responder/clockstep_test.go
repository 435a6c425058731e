package responder

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/internal/clock"
)

// A step of the worker's wall clock (NTP, an operator, a resumed VM) is no
// silence of its leader: a deposed leader's lower term stays fenced off
// after the clock jumps forward past StaleAfter, and the leader of the
// higher term is not stale for it.
func TestResponderFencesALowerTermAcrossAWallClockStep(t *testing.T) {
	c := &clock.Stepped{}
	r, err := New(Config{ID: 9, Epoch: epoch.New(), Cluster: "c1", Clock: c, StaleAfter: 5 * time.Second})
	require.NoError(t, err)
	f := &responderFixture{r: r}
	code, _ := f.beat(t, Request{Leader: 1, Term: 5, Version: 10})
	require.Equal(t, http.StatusOK, code)

	c.Step(time.Hour)
	code, _ = f.beat(t, Request{Leader: 2, Term: 4, Version: 11})
	require.Equal(t, http.StatusConflict, code, "the deposed leader is still fenced off: no time passed")
	require.Equal(t, uint64(5), r.Term())
	require.False(t, r.Stale())

	c.Step(-2 * time.Hour)
	require.False(t, r.Stale())
	code, _ = f.beat(t, Request{Leader: 1, Term: 5, Version: 12})
	require.Equal(t, http.StatusOK, code)
}

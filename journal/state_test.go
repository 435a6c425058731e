package journal

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
)

// TestStateNamesRoundTripThroughJSON: every raft state has one lower-case
// name, JSON carries the name, and decoding gives the state back.
func TestStateNamesRoundTripThroughJSON(t *testing.T) {
	for _, tc := range []struct {
		raft raft.StateType
		want State
		name string
	}{
		{raft.StateFollower, StateFollower, "follower"},
		{raft.StateCandidate, StateCandidate, "candidate"},
		{raft.StateLeader, StateLeader, "leader"},
		{raft.StatePreCandidate, StatePreCandidate, "pre-candidate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, State(tc.raft))
			require.Equal(t, tc.name, tc.want.String())
			b, err := json.Marshal(struct{ S State }{tc.want})
			require.NoError(t, err)
			require.JSONEq(t, `{"S":"`+tc.name+`"}`, string(b))
			var got struct{ S State }
			require.NoError(t, json.Unmarshal(b, &got))
			require.Equal(t, tc.want, got.S)
		})
	}
}

// TestStateTextRefusesUnknownValues: neither direction invents a state.
func TestStateTextRefusesUnknownValues(t *testing.T) {
	_, err := json.Marshal(State(9))
	require.ErrorContains(t, err, "unknown state 9")
	require.Equal(t, "state(9)", State(9).String())
	var s State
	require.ErrorContains(t, json.Unmarshal([]byte(`"StateLeader"`), &s), `unknown state "StateLeader"`)
}

// FuzzStateUnmarshalText: any text either is refused or decodes to the
// state whose name it is, and that state encodes back to the same text.
func FuzzStateUnmarshalText(f *testing.F) {
	for _, s := range []string{"follower", "candidate", "pre-candidate", "leader", "", "Leader", "state(9)"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalText(b); err != nil {
			require.ErrorContains(t, err, "unknown state")
			return
		}
		out, err := s.MarshalText()
		require.NoError(t, err)
		require.Equal(t, string(b), string(out))
	})
}

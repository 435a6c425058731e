package sim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// recordsState is a hand-made view of frontends 1 and 2 and worker 3,
// every member known alive at its current epoch everywhere.
func recordsState() (recordsView, map[uint64]epoch.Epoch) {
	epochs := map[uint64]epoch.Epoch{1: epoch.New(), 2: epoch.New(), 3: epoch.New()}
	v := recordsView{epochs: epochs, registries: map[uint64]map[uint64]cancel.NodeState{}, records: map[uint64]map[uint64]heartbeat.Member{}}
	for _, f := range []uint64{1, 2} {
		v.registries[f], v.records[f] = map[uint64]cancel.NodeState{}, map[uint64]heartbeat.Member{}
		for id, e := range epochs {
			v.registries[f][id] = cancel.NodeState{Node: id, Epoch: e, Status: cancel.StatusAlive}
			v.records[f][id] = heartbeat.Member{ID: id, Epoch: e, Status: heartbeat.StatusAlive}
		}
	}
	return v, epochs
}

func TestRecordsCheckPassesWhenEveryFrontendKnowsEveryEpochAlive(t *testing.T) {
	v, _ := recordsState()
	require.Empty(t, staleRecords(v))
	synctest.Test(t, func(t *testing.T) {
		r := &run{}
		r.checkRecords(t.Context(), time.Now(), func() recordsView { return v })
		require.Empty(t, r.failures)
	})
}

func TestRecordsCheckFailsOnAStaleRegistryOrRecord(t *testing.T) {
	v, epochs := recordsState()
	old := epoch.New()
	v.registries[2][3] = cancel.NodeState{Node: 3, Epoch: old, Status: cancel.StatusAlive} // missed the restart
	v.records[1][3] = heartbeat.Member{ID: 3, Epoch: epochs[3], Status: heartbeat.StatusDead}
	delete(v.registries[1], 2)
	require.Equal(t, []string{
		"frontend 1's registry does not know member 2",
		"frontend 1's member records hold member 3 dead at " + short(epochs[3]) + ", which runs " + short(epochs[3]),
		"frontend 2's registry holds member 3 alive at " + short(old) + ", which runs " + short(epochs[3]),
	}, staleRecords(v))

	synctest.Test(t, func(t *testing.T) {
		r := &run{}
		healed := time.Now()
		r.checkRecords(t.Context(), healed, func() recordsView { return v })
		require.Len(t, r.failures, 3)
		require.Contains(t, r.failures[0], "30s after the faults healed: frontend 1's registry does not know member 2")
		require.Equal(t, healed.Add(RecoveryBound), time.Now(), "the check waits out the bound")
	})
}

// A frontend's member records that missed a change its own catalog holds
// fail the check whatever the member runs: a transition of a member not
// running, or a record created or deleted, the replay skipped.
func TestRecordsCheckFailsOnRecordsBehindTheirOwnCatalog(t *testing.T) {
	v, _ := recordsState()
	v.changed = map[uint64]map[uint64]uint64{1: {1: 10, 2: 12, 7: 15}, 2: {1: 10, 2: 12}}
	v.replayed = map[uint64]map[uint64]uint64{1: {1: 10, 2: 11, 9: 5}, 2: {1: 10, 2: 12}}
	require.Equal(t, []string{
		"frontend 1's member records hold member 2 as changed at 11, its catalog as changed at 12",
		"frontend 1's member records lack member 7, which its catalog holds as changed at 15",
		"frontend 1's member records hold member 9 as changed at 5, which its catalog no longer holds",
	}, staleRecords(v))
	v.replayed[1] = map[uint64]uint64{1: 10, 2: 12, 7: 15}
	require.Empty(t, staleRecords(v))
}

// A view that turns fresh within the bound passes: the check waits for
// the heartbeats to land.
func TestRecordsCheckWaitsForTheRecordsWithinTheBound(t *testing.T) {
	v, epochs := recordsState()
	fresh := v.registries[2][3]
	v.registries[2][3] = cancel.NodeState{Node: 3, Epoch: epochs[3], Status: cancel.StatusDead}
	synctest.Test(t, func(t *testing.T) {
		r := &run{}
		healed := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		r.checkRecords(ctx, healed, func() recordsView {
			if time.Since(healed) >= 5*time.Second {
				v.registries[2][3] = fresh
			}
			return v
		})
		require.Empty(t, r.failures)
	})
}

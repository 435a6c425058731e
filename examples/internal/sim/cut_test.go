package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/internal/linearize"
)

func put(client int, value string, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: linearize.KV{Put: true, Key: "k", Value: value}, Call: call, Return: ret}
}

func get(client int, value string, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: linearize.KV{Key: "k"}, Output: value, Call: call, Return: ret}
}

// linearizableEras reports, for each era of ops split at c, whether it is
// linearizable.
func linearizableEras(ops []porcupine.Operation, c cut) []bool {
	var out []bool
	for _, era := range eras(ops, []cut{c}) {
		out = append(out, porcupine.CheckOperations(linearize.KVModel, era))
	}
	return out
}

func TestErasSplitAHistoryAtAnOperatorsCut(t *testing.T) {
	state := func(v string) cut { return cut{keep: 10, start: 20, end: 30, state: map[string]string{"k": v}} }

	// A write acknowledged before keep must be in the surviving state.
	require.Equal(t, []bool{false, true}, linearizableEras([]porcupine.Operation{put(1, "a", 1, 2)}, state("")),
		"a write acknowledged before the survivor applied everything committed, missing from the surviving state")
	require.Equal(t, []bool{true, true}, linearizableEras([]porcupine.Operation{put(1, "a", 1, 2)}, state("a")))

	// One acknowledged after keep may be lost by design, and then stays lost.
	lost := []porcupine.Operation{put(1, "a", 1, 2), put(1, "b", 11, 12), get(2, "b", 13, 14)}
	require.Equal(t, []bool{true, true}, linearizableEras(lost, state("a")), "a write acknowledged after keep is lost")
	require.Equal(t, []bool{true, false}, linearizableEras(append(lost, get(2, "b", 31, 32)), state("a")),
		"the new cluster reads a value its surviving state lost")
	require.Equal(t, []bool{true, true}, linearizableEras(append(lost, get(2, "a", 31, 32)), state("a")))

	// No value nobody wrote.
	require.Equal(t, []bool{false, true}, linearizableEras([]porcupine.Operation{put(1, "a", 1, 2)}, state("z")),
		"a surviving value no write of the old cluster wrote")

	// A write in flight across the cut may land on the new cluster.
	inflight := []porcupine.Operation{put(1, "a", 1, 2), put(3, "c", 25, unknownReturn), get(2, "c", 31, 32)}
	require.Equal(t, []bool{true, true}, linearizableEras(inflight, state("a")), "a write called before the end lands after it")
	// A write that returned before the new cluster started did not.
	early := []porcupine.Operation{put(1, "a", 1, 2), put(3, "c", 11, 15), get(2, "c", 31, 32)}
	require.Equal(t, []bool{true, false}, linearizableEras(early, state("a")))

	// The new cluster is checked from its own start: a stale read after
	// a newer acknowledged write fails there.
	after := []porcupine.Operation{put(1, "a", 1, 2), put(1, "d", 31, 32), get(2, "a", 33, 34)}
	require.Equal(t, []bool{true, false}, linearizableEras(after, state("a")))

	// A read across the end is in neither era.
	across := []porcupine.Operation{put(1, "a", 1, 2), get(2, "zz", 25, 35)}
	require.Equal(t, []bool{true, true}, linearizableEras(across, state("a")))
}

func TestErasWithoutACutAreTheWholeHistory(t *testing.T) {
	ops := []porcupine.Operation{put(1, "a", 1, 2), get(2, "a", 3, 4)}
	require.Equal(t, [][]porcupine.Operation{ops}, eras(ops, nil))
}

// Sessions of the old cluster are compared with the new cluster's only up
// to the index the two agree on; past it, a disagreement across a cut is
// the loss the cut allows, and within one era it is still a finding.
func TestWatchCheckComparesSessionsAcrossACutUpToItsIndex(t *testing.T) {
	failures := func(cuts []uint64, segs ...*segment) string {
		r := &run{hist: newHistory(time.Now(), nil)}
		ws := &watches{r: r, segments: segs, cuts: cuts}
		ws.check()
		return strings.Join(r.failures, "\n")
	}
	e5 := seen{index: 5, op: catalog.OpUpdate, path: "/kv/k0", value: "a"}
	lost := seen{index: 7, op: catalog.OpUpdate, path: "/kv/k1", value: "lost"}
	other := seen{index: 7, op: catalog.OpUpdate, path: "/kv/k1", value: "new"}
	old := &segment{watcher: 0, frontend: 1, from: 4, upTo: 8, events: []seen{e5, lost}}
	next := &segment{watcher: 1, frontend: 2, from: 4, upTo: 8, events: []seen{e5, other}, era: 1}
	require.Empty(t, failures([]uint64{6}, old, next), "index 7 of the old cluster is lost at a cut at 6")
	require.Contains(t, failures([]uint64{7}, old, next), "at index 7", "up to the cut's index the clusters agree")
	missed := &segment{watcher: 1, frontend: 2, from: 4, upTo: 8, events: []seen{other}, era: 1}
	require.Contains(t, failures([]uint64{6}, old, missed), "at index 5", "a new cluster's session that missed an event before the cut")
	require.Contains(t, failures(nil, old, next), "at index 7", "without a cut, the sessions must agree")
}

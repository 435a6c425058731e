package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
)

// The watch check finds a session that missed an event another session
// saw at a covered index, one that delivered an event twice, one that
// delivered an event at or before its resume index, and a last event that
// does not give a register's value at the final index.
func TestWatchCheckFindsAMissedAndARepeatedEvent(t *testing.T) {
	failures := func(segs ...*segment) string {
		r := &run{hist: newHistory(time.Now(), nil)}
		ws := &watches{r: r, segments: segs}
		ws.check() // no frontend runs: the final values are not compared
		return strings.Join(r.failures, "\n")
	}
	e5 := seen{index: 5, op: catalog.OpUpdate, path: "/kv/k0", value: "a"}
	e7 := seen{index: 7, op: catalog.OpUpdate, path: "/kv/k1", value: "b"}
	whole := &segment{watcher: 0, frontend: 1, from: 4, upTo: 8, events: []seen{e5, e7}}
	require.Empty(t, failures(whole, &segment{watcher: 1, frontend: 2, from: 6, upTo: 9, events: []seen{e7}}), "two sessions that agree")
	require.Contains(t, failures(whole, &segment{watcher: 1, frontend: 2, from: 4, upTo: 8, events: []seen{e7}}), "at index 5", "a session that missed an event")
	require.Contains(t, failures(&segment{watcher: 1, frontend: 2, from: 4, upTo: 8, events: []seen{e5, e7, e7}}), "out of order or twice")
	require.Contains(t, failures(&segment{watcher: 1, frontend: 2, from: 6, upTo: 8, events: []seen{e5}}), "is not after it")

	// The last event up to the final index must give the value there;
	// events after it do not count.
	final := func(v string, segs ...*segment) string {
		r := &run{hist: newHistory(time.Now(), nil)}
		n := &catalog.Node{Path: "/kv/k1", Attrs: map[string]catalog.Value{"v": catalog.String(v)}}
		k0 := &catalog.Node{Path: "/kv/k0", Attrs: map[string]catalog.Value{"v": catalog.String("a")}}
		ws := &watches{r: r, segments: segs, final: 8, values: map[string]*catalog.Node{"/kv/k0": k0, "/kv/k1": n}}
		ws.check()
		return strings.Join(r.failures, "\n")
	}
	later := seen{index: 9, op: catalog.OpUpdate, path: "/kv/k1", value: "c"}
	require.Empty(t, final("b", &segment{from: 4, upTo: 9, events: []seen{e5, e7, later}}))
	require.Contains(t, final("x", &segment{from: 4, upTo: 9, events: []seen{e5, e7, later}}), "the final index 8 holds")
}

// After a recovery a watcher resumes from what it saw up to the cut, not
// from an index the old cluster reached past it: the new cluster goes on
// from the cut with batches of its own at those indexes, and a resume
// from above its index would skip them.
func TestWatcherResumesFromTheCutAfterARecovery(t *testing.T) {
	ws := &watches{r: &run{hist: newHistory(time.Now(), nil)}}
	old := ws.newSegment(0, 1, 40)
	old.upTo = 100
	other := ws.newSegment(1, 2, 10)
	other.upTo = 50
	ws.segments = append(ws.segments, old, other)
	require.Equal(t, uint64(100), ws.lastIndex(0))

	ws.cutAt(60)
	require.Equal(t, uint64(60), ws.lastIndex(0), "the old cluster's events past the cut do not stand")
	require.Equal(t, uint64(50), ws.lastIndex(1), "a session that ended before the cut keeps its index")

	resumed := ws.newSegment(0, 3, ws.lastIndex(0))
	resumed.upTo = 75
	ws.segments = append(ws.segments, resumed)
	require.Equal(t, uint64(75), ws.lastIndex(0), "the new cluster's sessions count whole")
}

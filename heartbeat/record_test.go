package heartbeat

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
	"github.com/metatree/metatree/heartbeat/responder"
)

func TestMemberRecordRoundTrip(t *testing.T) {
	tree := catalog.New()
	m := Member{ID: 42, Addr: "h:1", Kind: epoch.KindWorker, Role: "pool-a", Epoch: epoch.New(), Generation: 3, Status: StatusDead, Term: 7}
	data, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: ClusterPath, Kind: "cluster"},
		{Type: catalog.OpCreate, Path: MembersPath, Kind: "members"},
		{Type: catalog.OpCreate, Path: MemberPath(42), Kind: MemberKind, Set: m.attrs()},
	}}.Encode()
	require.NoError(t, err)
	require.NoError(t, tree.Apply(1, data).(*catalog.Result).Err)
	n, ok := tree.Get(MemberPath(42))
	require.True(t, ok)
	got, err := memberFromNode(&n)
	require.NoError(t, err)
	m.Modified, m.Created = 1, 1
	m.Since = got.Since
	require.Equal(t, m, got)
	require.Equal(t, wire.TemporaryEpoch(m.Epoch, 3), got.PublishedEpoch())
}

func TestMemberRecordMalformed(t *testing.T) {
	good := map[string]catalog.Value{attrKind: catalog.String("worker"), attrStatus: catalog.String("alive"), attrEpoch: catalog.String(epoch.New().String())}
	with := func(k string, v catalog.Value) map[string]catalog.Value {
		a := map[string]catalog.Value{}
		for x, y := range good {
			a[x] = y
		}
		a[k] = v
		return a
	}
	for _, tc := range []struct {
		name string
		node catalog.Node
		want string
	}{
		{"name", catalog.Node{Name: "x", Path: MembersPath + "/x", Attrs: good}, "not a member id"},
		{"zero id", catalog.Node{Name: "0", Path: MembersPath + "/0", Attrs: good}, "not a member id"},
		{"kind", catalog.Node{Name: "1", Path: MembersPath + "/1", Attrs: with(attrKind, catalog.String("robot"))}, "unknown member kind"},
		{"epoch", catalog.Node{Name: "1", Path: MembersPath + "/1", Attrs: with(attrEpoch, catalog.String("zz"))}, "bad epoch"},
		{"status", catalog.Node{Name: "1", Path: MembersPath + "/1", Attrs: with(attrStatus, catalog.String("meh"))}, "unknown member status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := memberFromNode(&tc.node)
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestEventsBetween(t *testing.T) {
	e1, e2 := epoch.New(), epoch.New()
	alive := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e1, Generation: 1, Status: StatusAlive}
	fresh := Member{ID: 5, Kind: epoch.KindWorker, Status: StatusAlive}
	dead := alive
	dead.Status, dead.Generation = StatusDead, 2
	back := alive
	back.Generation = 3
	restarted := alive
	restarted.Epoch, restarted.Generation = e2, 2
	deadRestarted := restarted
	deadRestarted.Generation = 3
	moved := alive
	moved.Addr = "elsewhere"
	deadAgain := dead
	deadAgain.Generation = 4
	alive.Created, fresh.Created, dead.Created, back.Created, deadAgain.Created = 1, 1, 1, 1, 1
	restarted.Created, deadRestarted.Created, moved.Created = 1, 1, 1
	readded := alive
	readded.Created = 20
	// Dead at gen 2, then restarted, dead and restarted again with E2 at
	// gen 5: the record says when E2 was recorded.
	late := deadRestarted
	late.Generation, late.EpochGeneration = 5, 5
	tmp := wire.TemporaryEpoch(e1, 2)
	// Declared dead at generation 2, back with a fresh epoch at 3.
	returned := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e2, Generation: 3, Status: StatusAlive, Died: 2, Created: 1}
	deadDied := dead
	deadDied.Died = 2
	e3 := epoch.New()
	later := returned
	later.Epoch, later.Generation = e3, 4
	// Declared dead at generation 4 (an epoch restarted to at 3), back
	// with E3, first recorded at 6.
	twice := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e3, Generation: 6, EpochGeneration: 6, Status: StatusAlive, Died: 4, Created: 1}
	// Restarted with E2 at generation 2, declared dead at 3.
	restartedThenDead := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e2, Generation: 3, EpochGeneration: 2, Status: StatusDead, Died: 3, Created: 1}
	// Dead at generation 2, back with E2 at 3, dead again at 4.
	backThenDead := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e2, Generation: 4, EpochGeneration: 3, Status: StatusDead, Died: 4, Created: 1}
	for _, tc := range []struct {
		name          string
		before, after *Member
		want          []epoch.Event
	}{
		{"added", nil, &fresh, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Added}}},
		{"first answer", &fresh, &alive, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Alive, NewEpoch: e1, Generation: 1}}},
		{"restarted", &alive, &restarted, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e2, Generation: 2}}},
		{"dead", &alive, &dead, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 2}}},
		{"alive again", &dead, &back, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Alive, OldEpoch: tmp, NewEpoch: e1, Generation: 3}}},
		{"back with a new epoch", &dead, &deadRestarted, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e2, Generation: 3}}},
		{"restarted in a gap, folded", &dead, &late, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e2, Generation: 5, EpochGeneration: 5}}},
		{"removed", &alive, nil, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Removed, OldEpoch: e1, Generation: 1}}},
		{"address change", &alive, &moved, nil},
		// Resyncs compare records that are not consecutive.
		{"dead and back, folded", &alive, &back, []epoch.Event{
			{Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 2},
			{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Alive, OldEpoch: tmp, NewEpoch: e1, Generation: 3}}},
		{"dead, back, dead again, folded", &dead, &deadAgain, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: wire.TemporaryEpoch(e1, 4), Generation: 4}}},
		{"back from a death with a fresh epoch", &deadDied, &returned, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e2, Generation: 3}}},
		{"dead and back with a fresh epoch, folded", &alive, &returned, []epoch.Event{
			{Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 2},
			{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e2, Generation: 3}}},
		// The death folded into a restart is delivered as the transition
		// right after the earlier view: a part on the later epoch, which
		// a consumer learnt ahead of the events, must not be judged by a
		// Dead that seems to skip the transitions that recorded it.
		{"dead, restarted twice, folded", &alive, &twice, []epoch.Event{
			{Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: wire.TemporaryEpoch(e1, 4), Generation: 2, EpochGeneration: alive.EpochGeneration},
			{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: wire.TemporaryEpoch(e1, 4), NewEpoch: e3, Generation: 6, EpochGeneration: 6}}},
		// A view that skipped the restart to the epoch that died names
		// that epoch: the restart first, then its death.
		{"restarted and dead, folded", &alive, &restartedThenDead, []epoch.Event{
			{Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e2, Generation: 2, EpochGeneration: 2},
			{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e2, NewEpoch: wire.TemporaryEpoch(e2, 3), Generation: 3, EpochGeneration: 2}}},
		{"back with a new epoch and dead, folded", &deadDied, &backThenDead, []epoch.Event{
			{Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e2, Generation: 3, EpochGeneration: 3},
			{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e2, NewEpoch: wire.TemporaryEpoch(e2, 4), Generation: 4, EpochGeneration: 3}}},
		{"a death before the earlier view", &returned, &later, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: e2, NewEpoch: e3, Generation: 4}}},
		{"restarted or dead after its first answer, folded", &fresh, &back, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Restarted, NewEpoch: e1, Generation: 3}}},
		{"removed and added again, folded", &alive, &readded, []epoch.Event{
			{Node: 5, Kind: epoch.KindWorker, Type: epoch.Removed, OldEpoch: e1, Generation: 1},
			{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: e1, Generation: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, eventsBetween(tc.before, tc.after, 9))
		})
	}
}

// FuzzResponder: any body gets a clear status, never a panic, and only a
// well-formed heartbeat for this member is answered 200.
func FuzzResponder(f *testing.F) {
	f.Add([]byte(`{"member":9,"term":1,"version":1,"frontends":[{"id":1,"gen":1,"epoch":"6ba7b810-9dad-41d1-80b4-00c04fd430c8"}]}`))
	f.Add([]byte(`{"member":9,"term":0,"frontends":[{"id":1,"dead":true}]}`))
	f.Add([]byte(`{"member":9,"term":1,"frontends":[{"id":1,"gen":3,"dead":true,"recorded":2,"ended":"6ba7b810-9dad-41d1-80b4-00c04fd430c8"}]}`))
	f.Add([]byte(`{"member":9,"frontends":[{"id":0},{"id":1},{"id":1}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"member":"9"}`))
	f.Add([]byte{0xff, 0x00})
	r, err := responder.New(responder.Config{ID: 9, Epoch: epoch.New()})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, responder.Path, bytes.NewReader(body)))
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
		require.Contains(t, w.Header().Get("Content-Type"), "application/json")
	})
}

func TestEventsBetweenFirstSeenDead(t *testing.T) {
	e := epoch.New()
	dead := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e, Generation: 4, Status: StatusDead}
	require.Equal(t, []epoch.Event{{Index: 9, Node: 5, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e, NewEpoch: wire.TemporaryEpoch(e, 4), Generation: 4}},
		eventsBetween(nil, &dead, 9))
}

// A view that skipped a restart and then saw the new epoch die (a lagging
// replica, a resync) must not cost a query that runs on a still later
// epoch, learnt ahead of the events: the events name the epoch that died,
// so the registry cancels the parts on it and on the epoch before it, and
// no others.
func TestFoldedRestartAndDeathKeepAPartOnALaterEpoch(t *testing.T) {
	e1, e2, x := epoch.New(), epoch.New(), epoch.New()
	reg := cancel.New(cancel.Config{})
	defer reg.Close()
	alive := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e1, Generation: 1, EpochGeneration: 1, Status: StatusAlive, Created: 1}
	for _, ev := range eventsBetween(nil, &alive, 3) {
		reg.Apply(ev)
	}
	coordinator := cancel.Member{Node: 1, Epoch: epoch.New()}
	register := func(e epoch.Epoch) *cancel.Query {
		q, err := reg.Register(t.Context(), coordinator, []cancel.Member{{Node: 5, Epoch: e}})
		require.NoError(t, err)
		return q
	}
	onE1, onE2, onX := register(e1), register(e2), register(x)

	dead := Member{ID: 5, Kind: epoch.KindWorker, Epoch: e2, Generation: 3, EpochGeneration: 2, Status: StatusDead, Died: 3, Created: 1}
	for _, ev := range eventsBetween(&alive, &dead, 9) {
		reg.Apply(ev)
	}
	require.NoError(t, onX.Context().Err(), "the death of the epoch before it cancelled a part on a later epoch")
	require.ErrorIs(t, context.Cause(onE1.Context()), cancel.ErrNodeRestarted)
	require.ErrorIs(t, context.Cause(onE2.Context()), cancel.ErrNodeDead)
	onX.Finish()
}

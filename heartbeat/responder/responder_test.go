package responder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
)

// manualClock is a clock whose Now only moves when the test says so.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
func (c *manualClock) NewTicker(time.Duration) (<-chan time.Time, func()) {
	panic("manualClock: no tickers")
}
func (c *manualClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	panic("manualClock: no timers")
}
func (c *manualClock) AfterFunc(time.Duration, func()) func() bool { panic("manualClock: no timers") }

type responderFixture struct {
	r      *Responder
	clock  *manualClock
	events []epoch.Event
}

func newResponderFixture(t *testing.T) *responderFixture {
	f := &responderFixture{clock: &manualClock{now: time.Unix(1000, 0)}}
	var err error
	f.r, err = New(Config{ID: 9, Epoch: epoch.New(), Cluster: "c1", Clock: f.clock, StaleAfter: 5 * time.Second,
		OnEvent: func(e epoch.Event) { f.events = append(f.events, e) }})
	require.NoError(t, err)
	return f
}

func (f *responderFixture) beat(t *testing.T, hb Request) (int, []byte) {
	t.Helper()
	if hb.Cluster == "" {
		hb.Cluster = "c1"
	}
	if hb.Member == 0 {
		hb.Member = 9
	}
	return f.post(t, hb)
}

// post sends hb as it is and returns the answer's status and body.
func (f *responderFixture) post(t *testing.T, hb Request) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(hb)
	require.NoError(t, err)
	w := httptest.NewRecorder()
	f.r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	return w.Code, w.Body.Bytes()
}

func (f *responderFixture) take() []epoch.Event { e := f.events; f.events = nil; return e }

func TestResponderAnswersWithItsEpoch(t *testing.T) {
	f := newResponderFixture(t)
	code, body := f.beat(t, Request{Leader: 1, Term: 3})
	require.Equal(t, http.StatusOK, code)
	var resp Response
	require.NoError(t, json.Unmarshal(body, &resp))
	require.Equal(t, f.r.Epoch(), resp.Epoch)
	require.Equal(t, uint64(9), resp.Member)
	require.Equal(t, uint64(3), resp.Term)
}

// A heartbeat that names this process's epoch as ended (the member was
// declared dead) makes it answer with a fresh epoch, once; one that names
// another epoch (a leader's stale view), or one refused for its term,
// changes nothing.
func TestResponderDrawsAFreshEpochOnlyWhenToldItsOwnEnded(t *testing.T) {
	f := newResponderFixture(t)
	answer := func(hb Request) (int, epoch.Epoch) {
		code, body := f.beat(t, hb)
		var resp Response
		if code == http.StatusOK {
			require.NoError(t, json.Unmarshal(body, &resp))
		}
		return code, resp.Epoch
	}
	old := f.r.Epoch()
	code, got := answer(Request{Leader: 1, Term: 5, Ended: epoch.New()})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, old, got, "another epoch ended: not this process's")

	code, _ = answer(Request{Leader: 2, Term: 4, Ended: old})
	require.Equal(t, http.StatusConflict, code, "a deposed leader is refused")
	require.Equal(t, old, f.r.Epoch(), "and changes nothing")

	code, fresh := answer(Request{Leader: 1, Term: 5, Ended: old})
	require.Equal(t, http.StatusOK, code)
	require.NotEqual(t, old, fresh)
	require.False(t, fresh.Temporary())
	require.Equal(t, fresh, f.r.Epoch())
	// The same news again (the answer was lost, or the record lags): the
	// epoch it ended is no longer this process's.
	_, again := answer(Request{Leader: 1, Term: 5, Ended: old})
	require.Equal(t, fresh, again)
	require.Empty(t, f.take(), "its own epoch is no frontend event")
}

func TestResponderRejectsBadRequests(t *testing.T) {
	f := newResponderFixture(t)
	for _, tc := range []struct {
		name   string
		method string
		body   string
		code   int
		want   string
	}{
		{"get", http.MethodGet, "", http.StatusMethodNotAllowed, "POST only"},
		{"garbage", http.MethodPost, "{not json", http.StatusBadRequest, "malformed"},
		{"bad epoch", http.MethodPost, `{"member":9,"cluster":"c1","frontends":[{"id":1,"epoch":"zzz"}]}`, http.StatusBadRequest, "bad epoch"},
		{"other member", http.MethodPost, `{"member":8,"cluster":"c1","term":1}`, http.StatusConflict, "this is member 9"},
		{"other cluster", http.MethodPost, `{"member":9,"cluster":"c2","term":1}`, http.StatusConflict, "cluster"},
		{"too big", http.MethodPost, `{"member":9,"cluster":"` + strings.Repeat("x", wire.MaxBody+10) + `"}`, http.StatusRequestEntityTooLarge, "over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			f.r.ServeHTTP(w, httptest.NewRequest(tc.method, Path, strings.NewReader(tc.body)))
			require.Equal(t, tc.code, w.Code)
			require.Contains(t, w.Body.String(), tc.want)
		})
	}
	require.Empty(t, f.take())
	require.Zero(t, f.r.Term())
}

func TestResponderIgnoresLowerTerm(t *testing.T) {
	f := newResponderFixture(t)
	a, b := epoch.New(), epoch.New()
	code, _ := f.beat(t, Request{Leader: 1, Term: 5, Version: 10, Frontends: []FrontendEpoch{{ID: 1, Gen: 1, Epoch: a}}})
	require.Equal(t, http.StatusOK, code)
	require.Len(t, f.take(), 1) // epoch.Added

	// A deposed leader (term 4) claims frontend 1 restarted: refused, no event.
	code, body := f.beat(t, Request{Leader: 2, Term: 4, Version: 20, Frontends: []FrontendEpoch{{ID: 1, Gen: 2, Epoch: b}}})
	require.Equal(t, http.StatusConflict, code)
	var rej wire.Rejection
	require.NoError(t, json.Unmarshal(body, &rej))
	require.Equal(t, uint64(5), rej.Term)
	require.Empty(t, f.take())
	fe, _ := f.r.Frontend(1)
	require.Equal(t, a, fe.Epoch)

	// The same term from the current leader is fine.
	code, _ = f.beat(t, Request{Leader: 1, Term: 5, Version: 20, Frontends: []FrontendEpoch{{ID: 1, Gen: 2, Epoch: b}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{{Index: 20, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: a, NewEpoch: b, Generation: 2}}, f.take())
}

func TestResponderFrontendTransitions(t *testing.T) {
	f := newResponderFixture(t)
	e1, e2, e3 := epoch.New(), epoch.New(), epoch.New()
	tmp := wire.TemporaryEpoch(e1, 2)
	steps := []struct {
		name    string
		version uint64
		list    []FrontendEpoch
		want    []epoch.Event
	}{
		{"first list", 10, []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}, {ID: 2, Gen: 1, Epoch: e2}},
			[]epoch.Event{{Index: 10, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e1, Generation: 1}, {Index: 10, Node: 2, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e2, Generation: 1}}},
		{"same list", 11, []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}, {ID: 2, Gen: 1, Epoch: e2}}, nil},
		{"1 declared dead", 12, []FrontendEpoch{{ID: 1, Gen: 2, Epoch: tmp, Dead: true}, {ID: 2, Gen: 1, Epoch: e2}},
			[]epoch.Event{{Index: 12, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 2}}},
		{"older list ignored", 11, []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}}, nil},
		{"older generation ignored", 13, []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}, {ID: 2, Gen: 1, Epoch: e2}}, nil},
		{"1 back with its epoch", 14, []FrontendEpoch{{ID: 1, Gen: 3, Epoch: e1}, {ID: 2, Gen: 1, Epoch: e2}},
			[]epoch.Event{{Index: 14, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Alive, OldEpoch: tmp, NewEpoch: e1, Generation: 3}}},
		{"2 restarted, 1 removed", 15, []FrontendEpoch{{ID: 2, Gen: 2, Epoch: e3}},
			[]epoch.Event{{Index: 15, Node: 2, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e2, NewEpoch: e3, Generation: 2}, {Index: 15, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Removed, OldEpoch: e1, Generation: 3}}},
	}
	for _, s := range steps {
		code, _ := f.beat(t, Request{Leader: 1, Term: 2, Version: s.version, Frontends: s.list})
		require.Equal(t, http.StatusOK, code, s.name)
		require.Equal(t, s.want, f.take(), s.name)
	}
	require.Equal(t, []FrontendEpoch{{ID: 2, Gen: 2, Epoch: e3}}, f.r.Frontends())
}

func TestResponderSilenceCancelsNothing(t *testing.T) {
	f := newResponderFixture(t)
	require.True(t, f.r.Stale(), "no heartbeat yet")
	e1 := epoch.New()
	f.beat(t, Request{Leader: 1, Term: 1, Version: 1, Frontends: []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}}})
	f.take()
	require.False(t, f.r.Stale())
	// Cut off from every frontend for a long time: stale, and no event.
	f.clock.Advance(time.Hour)
	require.True(t, f.r.Stale())
	require.Empty(t, f.take())
	fe, ok := f.r.Frontend(1)
	require.True(t, ok)
	require.Equal(t, e1, fe.Epoch, "silence changed a frontend's epoch")
	// A new leader with a higher term and the same (journaled) view: no event.
	f.beat(t, Request{Leader: 2, Term: 2, Version: 1, Frontends: []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}}})
	require.Empty(t, f.take())
	require.False(t, f.r.Stale())
}

func TestEpochs(t *testing.T) {
	e := epoch.New()
	require.False(t, e.IsZero())
	require.False(t, e.Temporary())
	p, err := epoch.Parse(e.String())
	require.NoError(t, err)
	require.Equal(t, e, p)
	tmp := wire.TemporaryEpoch(e, 7)
	require.True(t, tmp.Temporary())
	require.Equal(t, tmp, wire.TemporaryEpoch(e, 7), "temporary epochs are a function of journaled data")
	require.NotEqual(t, tmp, wire.TemporaryEpoch(e, 8))
	z, err := epoch.Parse("")
	require.NoError(t, err)
	require.True(t, z.IsZero())
	_, err = epoch.Parse("nope")
	require.Error(t, err)
	b, err := json.Marshal(FrontendEpoch{ID: 1, Epoch: e})
	require.NoError(t, err)
	var fe FrontendEpoch
	require.NoError(t, json.Unmarshal(b, &fe))
	require.Equal(t, e, fe.Epoch)
}

func TestResponderFirstSeenDeadIsOneEvent(t *testing.T) {
	f := newResponderFixture(t)
	tmp := wire.TemporaryEpoch(epoch.New(), 3)
	code, _ := f.beat(t, Request{Leader: 1, Term: 1, Version: 7, Frontends: []FrontendEpoch{{ID: 4, Gen: 3, Epoch: tmp, Dead: true}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{{Index: 7, Node: 4, Kind: epoch.KindFrontend, Type: epoch.Dead, NewEpoch: tmp, Generation: 3}}, f.take())
}

// A frontend removed and added again under its id between two lists (its
// host replaced) is a new incarnation: its generations restart, so only
// Since (the record's creation index) tells the lists apart. The old
// epoch's queries are cancelled once the new epoch is known (epoch.Restarted),
// and a leader that sends no Since changes nothing.
func TestResponderSeesAFrontendAddedAgain(t *testing.T) {
	f := newResponderFixture(t)
	e1, e2 := epoch.New(), epoch.New()
	code, _ := f.beat(t, Request{Leader: 1, Term: 3, Version: 100, Frontends: []FrontendEpoch{{ID: 2, Gen: 2, Epoch: e1, Since: 10}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{{Index: 100, Node: 2, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e1, Generation: 2}}, f.take())

	// The new record, before its process answered: nothing to report yet.
	f.beat(t, Request{Leader: 1, Term: 3, Version: 200, Frontends: []FrontendEpoch{{ID: 2, Gen: 0, Since: 150}}})
	require.Empty(t, f.take())
	// Its process answers with e2 (generation 1, below the old record's 2).
	f.beat(t, Request{Leader: 1, Term: 3, Version: 300, Frontends: []FrontendEpoch{{ID: 2, Gen: 1, Epoch: e2, Since: 150}}})
	require.Equal(t, []epoch.Event{{Index: 300, Node: 2, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e2, Generation: 1}}, f.take())
	fe, ok := f.r.Frontend(2)
	require.True(t, ok)
	require.Equal(t, e2, fe.Epoch)

	// A list of the old incarnation (a delayed leader) is ignored.
	f.beat(t, Request{Leader: 1, Term: 3, Version: 300, Frontends: []FrontendEpoch{{ID: 2, Gen: 5, Epoch: e1, Since: 10}}})
	require.Empty(t, f.take())
	// Lists without Since (an older leader) compare generations as before.
	f.beat(t, Request{Leader: 1, Term: 3, Version: 400, Frontends: []FrontendEpoch{{ID: 2, Gen: 1, Epoch: e2}}})
	require.Empty(t, f.take())
}

// A member that missed the lists in which a frontend was declared dead and
// came back (it was cut off, or a new leader's first list) still hears of
// the death: a later generation with the same epoch is a death in between,
// delivered as epoch.Dead (Index 0) then epoch.Alive, which cancels the fragments that
// frontend coordinated, as every frontend cancelled its queries.
func TestResponderSeesADeathItMissed(t *testing.T) {
	f := newResponderFixture(t)
	e1, e2 := epoch.New(), epoch.New()
	f.beat(t, Request{Leader: 1, Term: 1, Version: 10, Frontends: []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1}, {ID: 2}}})
	f.take()
	tmp := wire.TemporaryEpoch(e1, 2)
	code, _ := f.beat(t, Request{Leader: 1, Term: 1, Version: 20, Frontends: []FrontendEpoch{{ID: 1, Gen: 3, Epoch: e1}, {ID: 2}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{
		{Node: 1, Kind: epoch.KindFrontend, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 2},
		{Index: 20, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Alive, OldEpoch: tmp, NewEpoch: e1, Generation: 3},
	}, f.take())

	// From no epoch, past its first answer: restarted (or died) in between.
	code, _ = f.beat(t, Request{Leader: 1, Term: 1, Version: 30, Frontends: []FrontendEpoch{{ID: 1, Gen: 3, Epoch: e1}, {ID: 2, Gen: 2, Epoch: e2}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{{Index: 30, Node: 2, Kind: epoch.KindFrontend, Type: epoch.Restarted, NewEpoch: e2, Generation: 2}}, f.take())

	// Declared dead at generation 4 and back with a fresh epoch: the list
	// names the death (Died), so a skipped one is still a death, not a
	// restart alone.
	e3 := epoch.New()
	tmp = wire.TemporaryEpoch(e1, 4)
	code, _ = f.beat(t, Request{Leader: 1, Term: 1, Version: 40, Frontends: []FrontendEpoch{{ID: 1, Gen: 5, Epoch: e3, Died: 4}, {ID: 2, Gen: 2, Epoch: e2}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{
		{Node: 1, Kind: epoch.KindFrontend, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 4},
		{Index: 40, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e3, Generation: 5},
	}, f.take())

	// epoch.Restarted at 6, declared dead at 7 and back with e4 at 9: the epoch.Dead
	// takes the generation after the list's (6), the epoch.Restarted shows the
	// transitions skipped, so a part on e4 learnt ahead of the events is
	// judged by the event that names e4.
	e4 := epoch.New()
	tmp = wire.TemporaryEpoch(e3, 7)
	code, _ = f.beat(t, Request{Leader: 1, Term: 1, Version: 50, Frontends: []FrontendEpoch{{ID: 1, Gen: 9, Epoch: e4, Died: 7}, {ID: 2, Gen: 2, Epoch: e2}}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []epoch.Event{
		{Node: 1, Kind: epoch.KindFrontend, Type: epoch.Dead, OldEpoch: e3, NewEpoch: tmp, Generation: 6},
		{Index: 50, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e4, Generation: 9},
	}, f.take())
}

// A heartbeat with a higher term fences lower terms off only while its
// sender keeps beating: one forged heartbeat (term 1000) cannot keep the
// real leader (term 5) away for longer than StaleAfter, while a live leader
// of a higher term keeps a deposed one away for good.
func TestResponderHigherTermFencesOnlyWhileItsSenderBeats(t *testing.T) {
	f := newResponderFixture(t)
	code, _ := f.beat(t, Request{Leader: 1, Term: 5, Version: 10})
	require.Equal(t, http.StatusOK, code)
	code, _ = f.beat(t, Request{Leader: 66, Term: 1000, Version: 11})
	require.Equal(t, http.StatusOK, code)

	// The real leader is refused while the forged term is fresh...
	f.clock.Advance(time.Second)
	code, _ = f.beat(t, Request{Leader: 1, Term: 5, Version: 12})
	require.Equal(t, http.StatusConflict, code)
	// ...and accepted once its sender has been silent for StaleAfter.
	f.clock.Advance(5 * time.Second)
	code, body := f.beat(t, Request{Leader: 1, Term: 5, Version: 13})
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, uint64(5), f.r.Term())
	require.False(t, f.r.Stale())

	// A deposed leader (term 4) stays fenced while the leader of term 5
	// beats, however long that goes on.
	for range 10 {
		f.clock.Advance(time.Second)
		code, _ = f.beat(t, Request{Leader: 1, Term: 5, Version: 14})
		require.Equal(t, http.StatusOK, code)
		code, _ = f.beat(t, Request{Leader: 2, Term: 4, Version: 15})
		require.Equal(t, http.StatusConflict, code)
	}
	require.Equal(t, uint64(5), f.r.Term())
}

// A list with a forged high version (the real term, or a higher one)
// holds the leader's lists off only until StaleAfter has passed without
// another list at that version: then the real leader's lists apply again
// and the frontends the forged list removed come back, in events that
// carry Index 0.
func TestResponderForgedListVersionLapses(t *testing.T) {
	for _, term := range []uint64{5, 1000} {
		t.Run(fmt.Sprintf("term %d", term), func(t *testing.T) {
			f := newResponderFixture(t)
			e1 := epoch.New()
			list := []FrontendEpoch{{ID: 1, Gen: 1, Epoch: e1, Since: 3}}
			code, _ := f.beat(t, Request{Leader: 1, Term: 5, Version: 10, Frontends: list})
			require.Equal(t, http.StatusOK, code)
			require.Len(t, f.take(), 1) // epoch.Added
			code, _ = f.beat(t, Request{Leader: 66, Term: term, Version: 1 << 40})
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, []epoch.Event{{Index: 1 << 40, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Removed, OldEpoch: e1, Generation: 1}}, f.take())

			for v := uint64(11); v < 20; v++ {
				f.clock.Advance(time.Second)
				f.beat(t, Request{Leader: 1, Term: 5, Version: v, Frontends: list})
				if evs := f.take(); len(evs) > 0 {
					// Index 0: a consumer applied the forged list's epoch.Removed
					// at a higher index, and must not drop this as a replay.
					require.Equal(t, []epoch.Event{{Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e1, Generation: 1}}, evs)
					require.Greater(t, v, uint64(15), "the real list applied before StaleAfter")
					_, ok := f.r.Frontend(1)
					require.True(t, ok)
					return
				}
			}
			t.Fatal("the real leader's lists never applied again")
		})
	}
}

package sim

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestHTTPOutcomes maps the API's answers onto the history as
// examples/API.md states them.
func TestHTTPOutcomes(t *testing.T) {
	for _, c := range []struct {
		a    apiAnswer
		want outcome
	}{
		{apiAnswer{status: http.StatusOK}, applied},
		{apiAnswer{err: errors.New("connection reset")}, unknown},
		{apiAnswer{status: http.StatusServiceUnavailable, code: "outcome_unknown"}, unknown},
		{apiAnswer{status: http.StatusInternalServerError, code: "internal"}, unknown},
		{apiAnswer{status: http.StatusServiceUnavailable, code: "no_leader"}, refused},
		{apiAnswer{status: http.StatusServiceUnavailable, code: "starting"}, refused},
		{apiAnswer{status: http.StatusInsufficientStorage, code: "quota"}, refused},
		{apiAnswer{status: http.StatusConflict, code: "conflict"}, refused},
		{apiAnswer{status: http.StatusBadRequest, code: "bad_request"}, refused},
	} {
		if got := c.a.outcome(); got != c.want {
			t.Errorf("%v: outcome %d, want %d", c.a, got, c.want)
		}
	}
}

// TestHTTPRemovedAnswer allows a 410 removed only from a frontend whose
// removal the simulator asked for.
func TestHTTPRemovedAnswer(t *testing.T) {
	r := &run{fleet: newFleet(3)}
	h := &httpClient{cl: &clients{r: r}}
	gone := apiAnswer{status: http.StatusGone, code: "removed"}
	if h.removedAnswer(2, gone) {
		t.Fatal("a 410 removed from a frontend nobody removed is allowed")
	}
	r.askRemoval(2)
	if !h.removedAnswer(2, gone) {
		t.Fatal("a 410 removed from a frontend being removed is not allowed")
	}
	if h.removedAnswer(3, gone) {
		t.Fatal("a 410 removed from another frontend is allowed")
	}
	if h.removedAnswer(2, apiAnswer{status: http.StatusGone, code: "compacted"}) {
		t.Fatal("a 410 compacted counts as removed")
	}
}

// TestLocalGETsJudgedAgainstTheReturnedOnes holds a local GET to what the
// GETs that returned before it was sent saw, not to those that overlap
// it.
func TestLocalGETsJudgedAgainstTheReturnedOnes(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	var seen localSeen
	if got := seen.floor(at(0)); got != 0 {
		t.Fatalf("floor with no GET returned: %d, want 0", got)
	}
	seen = seen.add(at(1), 10)
	seen = seen.add(at(3), 7) // sent before the first returned
	seen = seen.add(at(5), 20)
	for _, c := range []struct {
		sent int
		want uint64
	}{{0, 0}, {1, 0}, {2, 10}, {4, 10}, {5, 10}, {6, 20}} {
		if got := seen.floor(at(c.sent)); got != c.want {
			t.Errorf("floor of a GET sent at %d: %d, want %d", c.sent, got, c.want)
		}
	}
}

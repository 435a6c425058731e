package sim

import (
	"errors"
	"net/http"
	"testing"
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

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

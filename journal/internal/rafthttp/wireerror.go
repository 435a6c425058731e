package rafthttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/metatree/metatree/journal/internal/errs"
)

// Wire errors: how the serving side writes an error as JSON with a code,
// and how the sending side turns that response back into the sentinel.

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Wire error codes: a typed error crosses the wire as a code, and comes
// back as the same sentinel.
var errorCodes = []struct {
	code   string
	err    error
	status int
}{
	{"too_large", errTooLarge, http.StatusRequestEntityTooLarge},
	{"entry_too_large", errs.ErrTooLarge, http.StatusRequestEntityTooLarge},
	{"malformed", errs.ErrMalformed, http.StatusBadRequest},
	{"invalid_proposal", errs.ErrInvalidProposal, http.StatusBadRequest},
	{"cluster_mismatch", errs.ErrClusterMismatch, http.StatusForbidden},
	{"peer_identity", errs.ErrPeerIdentity, http.StatusForbidden},
	{"role_mismatch", errs.ErrRoleMismatch, http.StatusConflict},
	{"unsafe_removal", errs.ErrUnsafeRemoval, http.StatusConflict},
	{"not_caught_up", errs.ErrNotCaughtUp, http.StatusConflict},
	{"removed", errs.ErrRemoved, http.StatusGone},
	{"unknown_member", errs.ErrUnknownMember, http.StatusGone},
	{"not_leader", errs.ErrNotLeader, http.StatusMisdirectedRequest},
	{"no_leader", errs.ErrNoLeader, http.StatusServiceUnavailable},
	{"busy", errs.ErrBusy, http.StatusServiceUnavailable},
	{"unreachable", errs.ErrUnreachable, http.StatusServiceUnavailable},
	{"halted", errs.ErrHalted, http.StatusServiceUnavailable},
	{"version", errs.ErrVersion, http.StatusConflict},
	{"no_space", errs.ErrNoSpace, http.StatusInsufficientStorage},
	{"closed", errs.ErrClosed, http.StatusServiceUnavailable},
	{"stale", errs.ErrStale, http.StatusServiceUnavailable},
	{"outcome_unknown", errs.ErrOutcomeUnknown, http.StatusServiceUnavailable},
}

type wireError struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

// wireErrorOf returns err's HTTP status and wire form.
func wireErrorOf(err error) (int, wireError) {
	status, code := http.StatusInternalServerError, "internal"
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		status, code = http.StatusRequestEntityTooLarge, "too_large"
	} else {
		for _, c := range errorCodes {
			if errors.Is(err, c.err) {
				status, code = c.status, c.code
				break
			}
		}
	}
	return status, wireError{Code: code, Error: err.Error()}
}

// WriteError answers a request with err as a wire error: the status and
// code of the first sentinel err wraps, and its text.
func WriteError(w http.ResponseWriter, err error) {
	status, we := wireErrorOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(we)
}

// decodeErrorResponse turns a non-2xx answer into an error wrapping the
// sentinel its code names.
func decodeErrorResponse(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var we wireError
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&we)
	return we.err(resp.StatusCode)
}

// err turns a wire error back into an error wrapping the sentinel its code
// names; status is the HTTP status it came with (0: inside a stream).
func (we wireError) err(status int) error {
	for _, c := range errorCodes {
		if c.code == we.Code {
			if c.err == errs.ErrClosed {
				// The peer is shutting down: to the caller, unreachable.
				return newRemoteError("journal: unreachable: remote: ", we.Error, errs.ErrClosed, errs.ErrUnreachable)
			}
			return newRemoteError("journal: remote: ", we.Error, c.err)
		}
	}
	if status == 0 {
		return fmt.Errorf("journal: remote: %s: %s", we.Code, strings.TrimPrefix(we.Error, pkgPrefix))
	}
	return fmt.Errorf("journal: remote: HTTP %d: %s", status, strings.TrimPrefix(we.Error, pkgPrefix))
}

// pkgPrefix starts the messages of this package's errors.
const pkgPrefix = "journal: "

// remoteError is an error a peer answered with: the sentinels its code
// names, for errors.Is, and the peer's own message, which names the
// sentinel already in almost every case ("journal: propose: no leader").
// Its message is the peer's without the package's name, which its own
// prefix gives once: "journal: remote: propose: no leader".
type remoteError struct {
	msg  string
	errs []error
}

// newRemoteError returns the remoteError of a peer's message msg, whose
// code named errs (the first the one msg names); prefix starts its
// message.
func newRemoteError(prefix, msg string, errs ...error) error {
	short := strings.TrimPrefix(errs[0].Error(), pkgPrefix)
	msg = strings.TrimPrefix(msg, pkgPrefix)
	switch {
	case msg == "":
		msg = short
	case !strings.Contains(msg, short):
		msg = short + ": " + msg
	}
	return &remoteError{msg: prefix + msg, errs: errs}
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

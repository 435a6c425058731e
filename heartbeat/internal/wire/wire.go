package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxBody bounds a heartbeat request or response body.
const MaxBody = 4 << 20

// ErrMalformed: a heartbeat body or a member record could not be decoded.
// Package heartbeat exports it as heartbeat.ErrMalformed.
var ErrMalformed = errors.New("heartbeat: malformed")

// ErrLowerTerm is the refusal of a heartbeat from a deposed leader.
var ErrLowerTerm = errors.New("heartbeat: lower term than seen")

// Rejection is the body of a refused heartbeat (HTTP 409, 403, 400, 405,
// 413). Term is the highest raft term the member has seen, set on a
// refusal for a lower term.
type Rejection struct {
	Error string `json:"error"`
	Term  uint64 `json:"term"`
}

// DecodeJSON decodes one JSON value of at most MaxBody bytes from r into v;
// a body that does not decode is ErrMalformed.
func DecodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, MaxBody+1))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

// WriteJSON writes v as a JSON body with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

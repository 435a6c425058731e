package heartbeat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Path is where a Responder is mounted on every member's HTTP server.
const Path = "/_heartbeat"

// maxBody bounds a heartbeat request or response body.
const maxBody = 4 << 20

// Request is one heartbeat from the leader to one member.
type Request struct {
	Cluster string `json:"cluster,omitempty"`
	Leader  uint64 `json:"leader"`
	Term    uint64 `json:"term"`
	Member  uint64 `json:"member,omitempty"` // the member this heartbeat is for (the monitor appends it last)
	Round   uint64 `json:"round"`
	// Version is the catalog index the frontend list was read at; a member
	// does not go back to an older list (a new leader may lag the old one)
	// while lists at the newer version keep coming (within StaleAfter).
	Version   uint64          `json:"version"`
	Frontends []FrontendEpoch `json:"frontends"`
	// Ended is the epoch the member's record shows declared dead (zero:
	// the record is not dead). The log recorded that this epoch ended, so
	// it never becomes current again: a member still running with it
	// draws a fresh epoch and answers with that one (Responder), which
	// the monitor records as a restart. The monitor appends it last, after
	// Member.
	Ended Epoch `json:"ended,omitzero"`
}

// FrontendEpoch is one frontend's published epoch in a heartbeat.
type FrontendEpoch struct {
	ID  uint64 `json:"id"`
	Gen uint64 `json:"gen"`
	// Epoch is the last epoch the frontend answered with while it is alive
	// (merely slow or unreachable included), or its temporary epoch once it
	// is declared dead (Dead set). Zero: unknown, never acted on.
	Epoch Epoch `json:"epoch"`
	Dead  bool  `json:"dead,omitempty"`
	// Died is the generation of the frontend's last death (Member.Died;
	// zero: none, or an older leader): a member whose lists skipped from
	// before it to the frontend's return with a fresh epoch learns that a
	// death came between.
	Died uint64 `json:"died,omitempty"`
	// Since is the log index that created the frontend's member record. A
	// record removed and added again under the same id (a replaced host)
	// is a new incarnation whose generations count from zero again, so
	// Gen alone cannot order it against the old one. Zero: not sent (an
	// older leader).
	Since uint64 `json:"since,omitempty"`
}

// Response is a member's answer.
type Response struct {
	Member uint64 `json:"member"`
	Epoch  Epoch  `json:"epoch"`
	// Term is the highest raft term the member has seen.
	Term uint64 `json:"term"`
	// Version is the member's software version (ResponderConfig.Version).
	Version string `json:"version,omitempty"`
}

// rejection is the body of a refused heartbeat (HTTP 409).
type rejection struct {
	Error string `json:"error"`
	Term  uint64 `json:"term"`
}

// errLowerTerm is the refusal of a heartbeat from a deposed leader.
var errLowerTerm = errors.New("heartbeat: lower term than seen")

func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, maxBody+1))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

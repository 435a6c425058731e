package responder

import "github.com/metatree/metatree/heartbeat/epoch"

// Path is where a Responder is mounted on every member's HTTP server.
const Path = "/_heartbeat"

// Request is one heartbeat from the leader to one member.
type Request struct {
	Cluster string `json:"cluster,omitempty"`
	// Replaced lists the clusters the sender's cluster replaced by
	// restores (oldest first): a member that follows one of them moves
	// to Cluster at once, whatever the terms, and refuses the replaced
	// clusters' heartbeats from then on.
	Replaced []string `json:"replaced,omitempty"`
	Leader   uint64   `json:"leader"`
	Term     uint64   `json:"term"`
	Member   uint64   `json:"member,omitempty"` // the member this heartbeat is for (the monitor appends it last)
	Round    uint64   `json:"round"`
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
	Ended epoch.Epoch `json:"ended,omitzero"`
}

// FrontendEpoch is one frontend's published epoch in a heartbeat.
type FrontendEpoch struct {
	ID  uint64 `json:"id"`
	Gen uint64 `json:"gen"`
	// Epoch is the last epoch the frontend answered with while it is alive
	// (merely slow or unreachable included), or its temporary epoch once it
	// is declared dead (Dead set). Zero: unknown, never acted on.
	Epoch epoch.Epoch `json:"epoch"`
	Dead  bool        `json:"dead,omitempty"`
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
	// Recorded is the generation at which the frontend's (real) epoch was
	// first recorded (Member.EpochGeneration; zero: unknown, or an older
	// leader).
	Recorded uint64 `json:"recorded,omitempty"`
	// Ended is the real epoch a dead frontend was declared dead with (its
	// Epoch is then the temporary one). With Recorded, a member whose
	// lists skipped the frontend's restart to that epoch learns which
	// epoch died, so the death ends that epoch and the one before it, and
	// not a later one a fragment was dispatched from.
	Ended epoch.Epoch `json:"ended,omitzero"`
}

// Response is a member's answer.
type Response struct {
	Member uint64      `json:"member"`
	Epoch  epoch.Epoch `json:"epoch"`
	// Term is the highest raft term the member has seen.
	Term uint64 `json:"term"`
	// Version is the member's software version (Config.Version).
	Version string `json:"version,omitempty"`
}

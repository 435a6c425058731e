package journal

import (
	"fmt"

	"go.etcd.io/raft/v3"
)

// State is a node's raft state, as Status reports it. Its text form
// (String, and MarshalText for JSON) is "follower", "candidate",
// "pre-candidate" or "leader".
type State uint8

// The raft states. The zero State is StateFollower, the state a node
// starts in.
const (
	// StateFollower: the node follows a leader, or knows none and has not
	// yet campaigned.
	StateFollower State = State(raft.StateFollower)
	// StateCandidate: the node campaigns for leadership.
	StateCandidate State = State(raft.StateCandidate)
	// StateLeader: the node leads its term.
	StateLeader State = State(raft.StateLeader)
	// StatePreCandidate: the node asks whether it could win an election
	// before it campaigns (raft's pre-vote).
	StatePreCandidate State = State(raft.StatePreCandidate)
)

// String returns the state's name: "follower", "candidate",
// "pre-candidate" or "leader"; "state(N)" for a value no raft state has.
func (s State) String() string {
	switch s {
	case StateFollower:
		return "follower"
	case StateCandidate:
		return "candidate"
	case StateLeader:
		return "leader"
	case StatePreCandidate:
		return "pre-candidate"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText encodes the state as its name; a value no raft state has is
// an error.
func (s State) MarshalText() ([]byte, error) {
	if s > StatePreCandidate {
		return nil, fmt.Errorf("journal: marshal state: unknown state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a state name as String writes it.
func (s *State) UnmarshalText(b []byte) error {
	for v := StateFollower; v <= StatePreCandidate; v++ {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("journal: unmarshal state: unknown state %q (want follower, candidate, pre-candidate or leader)", b)
}

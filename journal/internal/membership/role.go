package membership

import (
	"encoding/json"
	"fmt"
)

// Role is a node's part in the cluster.
type Role uint8

const (
	// RoleUnset means "whatever the data dir says" on restart and Follower
	// on bootstrap or join.
	RoleUnset Role = 0
	// Follower is a voter: it takes part in elections and can lead.
	Follower Role = 1
	// Observer is a raft learner: it replays the log and serves reads but
	// never votes.
	Observer Role = 2
)

func (r Role) String() string {
	switch r {
	case Follower:
		return "follower"
	case Observer:
		return "observer"
	case RoleUnset:
		return "unset"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRole parses "follower" or "observer" (the ROLE file's content).
func ParseRole(s string) (Role, error) {
	switch s {
	case "follower":
		return Follower, nil
	case "observer":
		return Observer, nil
	}
	return RoleUnset, fmt.Errorf("journal: unknown role %q", s)
}

// MarshalJSON encodes the role as its name.
func (r Role) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON decodes a role name.
func (r *Role) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "unset" {
		*r = RoleUnset
		return nil
	}
	v, err := ParseRole(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Member is one node of the cluster as the membership records it.
type Member struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	Role Role   `json:"role"`
	// MaxVersion is the newest format version the member advertised when
	// it joined (0: it did not say, counted as journal.OldestVersion).
	MaxVersion uint32 `json:"max_version,omitempty"`
	// NoSpace is the member's no-space alarm: its data dir's disk is under
	// Config.ReserveBytes. While a voter's is raised, the cluster refuses
	// new writes (ErrNoSpace); the member clears it once it has space.
	NoSpace bool `json:"no_space,omitempty"`
}

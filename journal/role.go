package journal

import "github.com/metatree/metatree/journal/internal/membership"

// Role is a node's part in the cluster. It encodes in JSON as its name
// ("follower", "observer", "unset").
type Role = membership.Role

const (
	// RoleUnset means "whatever the data dir says" on restart and Follower
	// on bootstrap or join.
	RoleUnset Role = membership.RoleUnset
	// Follower is a voter: it takes part in elections and can lead.
	Follower Role = membership.Follower
	// Observer is a raft learner: it replays the log and serves reads but
	// never votes.
	Observer Role = membership.Observer
)

// ParseRole parses "follower" or "observer" (the ROLE file's content).
func ParseRole(s string) (Role, error) { return membership.ParseRole(s) }

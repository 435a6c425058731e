package secure

import (
	"errors"
	"fmt"
)

// ErrNoCredentials is the refusal to start a member that was given no
// credential and was not told to run without one (-insecure): anyone who
// reaches its port could then send it heartbeats, which cancel its work.
var ErrNoCredentials = errors.New("no credentials")

// RequireCredentials returns nil when the member has a credential (have)
// or runs insecure on purpose, and otherwise ErrNoCredentials with a
// message naming flags, the flags that give one.
func RequireCredentials(have, insecure bool, flags string) error {
	if have || insecure {
		return nil
	}
	return fmt.Errorf("%w: give %s, or -insecure to run without any (anyone who reaches the port can then send heartbeats and fragments)", ErrNoCredentials, flags)
}

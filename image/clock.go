package image

import "github.com/metatree/metatree/internal/clock"

// Clock is the time source of a Checkpointer: Now, NewTicker, NewTimer and
// AfterFunc, as tailscale's tstime.Clock has them. Tests substitute one
// they advance by hand.
type Clock = clock.Clock

package responder

import "github.com/metatree/metatree/internal/clock"

// Clock is the time source: Now, NewTicker, NewTimer and AfterFunc, as
// tailscale's tstime.Clock has them. Nil in a Config means the
// real clock. Tests run under testing/synctest with the real clock, or
// inject their own.
type Clock = clock.Clock

package epoch

import "errors"

// ErrInvalid: a bad argument or config value. Package heartbeat and its
// responder return this same sentinel (heartbeat.ErrInvalid,
// responder.ErrInvalid), so one errors.Is check covers all three.
var ErrInvalid = errors.New("heartbeat: invalid")

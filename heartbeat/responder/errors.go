package responder

import "github.com/metatree/metatree/heartbeat/epoch"

// ErrInvalid: a bad Config. It is epoch.ErrInvalid, the sentinel
// package heartbeat returns as well.
var ErrInvalid = epoch.ErrInvalid

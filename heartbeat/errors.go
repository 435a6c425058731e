package heartbeat

import (
	"errors"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
)

// Sentinels, checked with errors.Is.
var (
	// ErrMalformed: a heartbeat body or a member record could not be decoded.
	ErrMalformed = wire.ErrMalformed
	// ErrFenced: a newer leader claimed the monitor; this one's transitions
	// are refused.
	ErrFenced = errors.New("heartbeat: fenced by a newer leader")
	// ErrNotFound: no such member.
	ErrNotFound = errors.New("heartbeat: no such member")
	// ErrExists: a member with that id already exists.
	ErrExists = errors.New("heartbeat: member exists")
	// ErrClosed: the component was closed.
	ErrClosed = errors.New("heartbeat: closed")
	// ErrInvalid: a bad argument or config value. It is epoch.ErrInvalid,
	// which package heartbeat/responder and epoch.ParseKind return as well.
	ErrInvalid = epoch.ErrInvalid
)

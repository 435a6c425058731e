package heartbeat

import "errors"

// Sentinels, checked with errors.Is.
var (
	// ErrMalformed: a heartbeat body or a member record could not be decoded.
	ErrMalformed = errors.New("heartbeat: malformed")
	// ErrFenced: a newer leader claimed the monitor; this one's transitions
	// are refused.
	ErrFenced = errors.New("heartbeat: fenced by a newer leader")
	// ErrNotFound: no such member.
	ErrNotFound = errors.New("heartbeat: no such member")
	// ErrExists: a member with that id already exists.
	ErrExists = errors.New("heartbeat: member exists")
	// ErrClosed: the component was closed.
	ErrClosed = errors.New("heartbeat: closed")
	// ErrInvalid: a bad argument or config value.
	ErrInvalid = errors.New("heartbeat: invalid")
)

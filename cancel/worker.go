package cancel

import "context"

// RegisterFragment is Register on the worker side: a fragment is tied to
// its coordinator only, and is cancelled when that coordinator's epoch
// changes (an event from heartbeat.Responder) or it is declared dead or
// removed. A fragment whose coordinator epoch is already superseded fails at
// once, so a late fragment from a restarted coordinator never starts.
//
// A fragment from a coordinator that no event has named (the worker has
// not yet had a heartbeat listing it, or it was removed long ago) fails
// with ErrUnknownNode: no event would ever cancel it. The coordinator may
// retry after the worker's next heartbeat; a coordinator of another epoch
// than the one the worker knows is accepted, since the worker may lag, and
// the Restarted event that follows settles it.
func (r *Registry) RegisterFragment(parent context.Context, coordinator Member, opts ...RegisterOption) (*Query, error) {
	return r.register(parent, coordinator, nil, true, opts...)
}

package cancel

import "context"

// RegisterFragment is Register on the worker side: a fragment is tied to
// its coordinator only, and is cancelled when that coordinator's epoch
// changes (an event from heartbeat.Responder) or it is declared dead or
// removed. A fragment whose coordinator epoch is already superseded fails at
// once, so a late fragment from a restarted coordinator never starts.
func (r *Registry) RegisterFragment(parent context.Context, coordinator Member, opts ...RegisterOption) (*Query, error) {
	return r.Register(parent, coordinator, nil, opts...)
}

package frontend

import (
	"context"
	"fmt"

	"github.com/metatree/metatree/catalog"
)

// Write replicates batch b and returns the catalog's result once the batch
// has applied on this frontend: a non-leader forwards it to the leader and
// waits for its own apply, so the tree shows the change when Write
// returns (read-your-writes). The wait is bounded by ctx and
// Config.RequestTimeout.
//
// There is one error to check. It is nil when every operation applied; it
// wraps the batch's own failure (catalog.ErrConflict for a failed
// precondition, catalog.ErrExists, catalog.ErrNotFound, …) when the batch
// applied as a no-op, and then the result is returned too, with the index
// it applied at; it wraps the journal's error (journal.ErrNoLeader,
// journal.ErrOutcomeUnknown, …) when the batch may not have applied, and
// then the result is nil.
//
// The batch is encoded in the cluster's format version, so that every
// member, including one not yet upgraded, reads it: a batch that needs a
// newer format fails with catalog.ErrUnsupportedVersion before anything
// is proposed. Writes under heartbeat's /_cluster, the member records, are
// refused with ErrReserved: they change only through [Frontend.AddMember],
// [Frontend.RemoveMember] and the heartbeats. The journal refuses them
// too when they are proposed as raw bytes (Journal().Propose).
func (f *Frontend) Write(ctx context.Context, b catalog.Batch) (*catalog.Result, error) {
	if err := checkReserved(b); err != nil {
		return nil, err
	}
	data, err := b.EncodeVersion(BatchVersion(f.journal.ClusterVersion()))
	if err != nil {
		return nil, fmt.Errorf("frontend: write: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, checkedKey{}, true), f.cfg.RequestTimeout)
	defer cancel()
	_, v, err := f.journal.Propose(ctx, data)
	if err != nil {
		return nil, err
	}
	res, ok := v.(*catalog.Result)
	if !ok {
		// The tree is the journal's state machine: it returns nothing else.
		return nil, fmt.Errorf("frontend: write: the journal returned %T, want *catalog.Result", v)
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

package heartbeat

import (
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// State tied to a member's epoch.
//
// A member record changes only through journaled transitions (each bumps
// its generation: a restart to a new epoch, a death, a first answer) and
// its removal; a leader change writes the monitor's claim, never the records.
// So the record's Modified index names one stretch of one epoch, and the
// catalog's owned nodes (catalog.Owner) tied to it go, in the apply of the
// transition that ends it, on every replica alike. OwnerOf and Fence map a
// member and its epoch onto that version when the batch applies, not when
// it is built: a host whose catalog lags the log builds the same batch as
// one that does not.
//
// An epoch ends once: no record shows an epoch alive again after the log
// recorded its death. A member cut off and declared dead that answers
// again with its epoch is told that it ended and returns with a fresh one
// (see decide in the monitor), so a fence or an owner on the ended epoch
// is refused on every replica, across leader changes and image installs,
// for as long as the record exists.

// OwnerOf returns what ties a node a batch creates to member id's epoch:
// check, an operation to put in the batch before the create, which holds
// only while the member is alive with epoch when the batch applies (the
// zero epoch: with whatever epoch it has, none included for a member that
// has not yet answered a heartbeat), and owner, for the create's
// catalog.Op.Owner, which names the member's record at the version it has
// then. The check failing fails the batch with catalog.ErrConflict on
// every replica (the *catalog.OpError names the record's path); without
// the check, owner alone would also take a dead member's record.
func OwnerOf(id uint64, epoch epoch.Epoch, orphan bool) (check catalog.Op, owner catalog.Owner) {
	return Fence(id, epoch), catalog.Owner{Path: MemberPath(id), Orphan: orphan}
}

// Fence returns an operation (an OpCheck of member id's record) that makes
// a batch apply only while the member is alive with epoch (the zero
// epoch: with any epoch): a batch from a process whose epoch has since
// ended, or from a member that does not exist, fails with
// catalog.ErrConflict on every replica alike. It needs batch format
// version 2 (catalog.Cond.Match).
func Fence(id uint64, epoch epoch.Epoch) catalog.Op {
	match := map[string]catalog.Value{attrStatus: catalog.String(StatusAlive.String())}
	if !epoch.IsZero() {
		match[attrEpoch] = catalog.String(epoch.String())
	}
	return catalog.Op{Type: catalog.OpCheck, Path: MemberPath(id), Cond: catalog.Cond{Match: match}}
}

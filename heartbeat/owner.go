package heartbeat

import (
	"fmt"

	"github.com/metatree/metatree/catalog"
)

// State tied to a member's epoch.
//
// A member record changes only through journaled transitions (each bumps
// its generation: a restart to a new epoch, a death, a return) and its
// removal; a leader change writes the monitor's claim, never the records.
// So the record's Modified index names one stretch of one epoch, and the
// catalog's owned nodes (catalog.Owner) tied to it go, in the apply of the
// transition that ends it, on every replica alike. OwnerOf and Fence map a
// member and its epoch onto that version.

// OwnerOf returns the catalog owner that ties a node to member id's epoch,
// for catalog.Op.Owner: the member's record at its current version. It
// reads the record in t, which may lag the log: the owner is checked again
// when the batch applies, and a batch whose version is no longer current
// fails with catalog.ErrConflict on every replica. It fails with
// ErrNotFound if there is no such member and ErrEpochEnded unless the
// record shows the member alive with epoch.
func OwnerOf(t *catalog.Tree, id uint64, epoch Epoch, orphan bool) (catalog.Owner, error) {
	m, err := current(t, id, epoch)
	if err != nil {
		return catalog.Owner{}, err
	}
	return catalog.Owner{Path: MemberPath(id), Version: m.Modified, Orphan: orphan}, nil
}

// Fence returns an operation that makes a batch apply only while member
// id's epoch is the one the record in t shows now (an OpCheck of the
// record's version): a batch from a process whose epoch has since ended
// fails with catalog.ErrConflict on every replica. Its errors are
// OwnerOf's.
func Fence(t *catalog.Tree, id uint64, epoch Epoch) (catalog.Op, error) {
	m, err := current(t, id, epoch)
	if err != nil {
		return catalog.Op{}, err
	}
	return catalog.Op{Type: catalog.OpCheck, Path: MemberPath(id), Cond: catalog.Cond{Modified: m.Modified}}, nil
}

// current returns member id's record if it shows the member alive with
// epoch.
func current(t *catalog.Tree, id uint64, epoch Epoch) (Member, error) {
	if epoch.IsZero() {
		return Member{}, fmt.Errorf("%w: member %d: no epoch given", ErrInvalid, id)
	}
	n, ok := t.Get(MemberPath(id))
	if !ok {
		return Member{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	m, err := memberFromNode(&n)
	if err != nil {
		return Member{}, err
	}
	if m.Status != StatusAlive || m.Epoch != epoch {
		return Member{}, fmt.Errorf("%w: member %d is %s with epoch %s (as of index %d), not alive with %s", ErrEpochEnded, id, m.Status, m.Epoch, m.Modified, epoch)
	}
	return m, nil
}

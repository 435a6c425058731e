package frontend

import (
	"context"
	"fmt"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
)

// checkReserved refuses a batch that writes under the cluster's own
// records (Reserved) with ErrReserved naming the operation. A check there
// is a read and passes.
func checkReserved(b catalog.Batch) error {
	for i, op := range b.Ops {
		if op.Type != catalog.OpCheck && Reserved(op.Path) {
			return fmt.Errorf("%w: ops[%d]: %s", ErrReserved, i, op.Path)
		}
		if op.Type == catalog.OpMove && Reserved(op.To) {
			return fmt.Errorf("%w: ops[%d]: move to %s", ErrReserved, i, op.To)
		}
	}
	return nil
}

// checkedKey marks the context of a batch Write has already checked.
type checkedKey struct{}

// guardReserved is the journal's ProposalGuard: every proposal made on
// this frontend, raw bytes through Journal().Propose included, that
// writes under the cluster's own records is refused with ErrReserved,
// unless heartbeat proposes it (heartbeat.OwnWrite). A batch Write
// proposes was checked before it was encoded and is not decoded again.
// Bytes that are no batch are the tree's to refuse (CheckProposal, asked
// first).
func guardReserved(ctx context.Context, data []byte) error {
	if heartbeat.OwnWrite(ctx) || ctx.Value(checkedKey{}) != nil {
		return nil
	}
	b, err := catalog.DecodeBatch(data)
	if err != nil {
		return nil
	}
	return checkReserved(b)
}

package journal

import (
	"errors"
	"fmt"

	"github.com/metatree/metatree/journal/internal/raftstore"
)

// haltCause marks err with ErrHalted when a storage failure caused it: the
// store halted (raftstore.ErrHalted), so no write can be trusted until a
// restart, and the callers the failure answers must learn that a retry on
// this node is futile.
func haltCause(err error) error {
	if errors.Is(err, raftstore.ErrHalted) && !errors.Is(err, ErrHalted) {
		return fmt.Errorf("%w: %w", ErrHalted, err)
	}
	return err
}

package journal

import (
	"errors"
	"fmt"

	"github.com/metatree/metatree/journal/internal/raftstore"
)

// Halt stops the node's writes for a storage failure the host saw outside
// the journal, on the same disk (an image write whose fsync failed): the
// raft loop stops as after a failure of the journal's own, calls fail
// with an error wrapping ErrHalted and cause, reads go on under the
// staleness guard, and a restart recovers. It does not block.
func (j *Journal) Halt(cause error) { j.store.Halt(cause) }

// HaltSource is optionally implemented by a Snapshots hook whose writes share
// the journal's disk (*image.Store does). The journal watches Halting
// from Open to Close and halts with the hook's cause (Halt) once the
// channel is closed, including when it was closed before Open: the host
// wires nothing, and no order of construction misses a halt.
type HaltSource interface {
	// Halting returns a channel closed once the hook has halted.
	Halting() <-chan struct{}
	// Halted returns the cause once Halting is closed.
	Halted() error
}

// watchHalt halts the journal when the Snapshots hook h halts; it runs
// while the journal is open.
func (j *Journal) watchHalt(h HaltSource) {
	select {
	case <-j.stopc:
	case <-h.Halting():
		if err := h.Halted(); err != nil {
			j.Halt(err)
		}
	}
}

// writable returns why this node refuses new writes at once, before they
// reach raft: its storage halted (the loop may not have stopped yet), its
// disk is nearly full, or a voter's is (its no-space alarm), or it knows
// it was removed from the cluster.
func (j *Journal) writable() error {
	if err := j.store.Halted(); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, haltCause(err))
	}
	if err := j.removedErr(); err != nil {
		return err
	}
	if err := j.space.Refuse(); err != nil {
		return err
	}
	return j.noSpaceAlarm()
}

// removedErr returns an error wrapping ErrRemoved once this node knows it
// was removed (Status().Removed), and nil before.
func (j *Journal) removedErr() error {
	if j.removed.Load() {
		return fmt.Errorf("%w: node %d is no longer a member", ErrRemoved, j.id)
	}
	return nil
}

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

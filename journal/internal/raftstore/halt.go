package raftstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrHalted marks the error of a store that stopped writing after a storage
// failure: a write, fsync, create or rename under its directory failed, a
// read of the log failed, or Pebble reported a fatal error. A failed fsync
// may have dropped the dirty pages it was meant to persist, so nothing
// written since the last successful one can be trusted, and retrying the
// fsync would report success for data that is gone. The store refuses every write from then
// on; reads of what it acknowledged before go on. Only a restart, which
// recovers from what is durable, clears it. Check with errors.Is.
var ErrHalted = errors.New("raftstore: halted by a storage failure")

// IOError is a failed filesystem operation on one file, the cause a halted
// store reports.
type IOError struct {
	Op   string // "write", "sync", "create", "rename", ...
	Path string
	Err  error
}

func (e *IOError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }
func (e *IOError) Unwrap() error { return e.Err }

// halt holds the first storage failure of a store. It is safe for
// concurrent use: Pebble's background goroutines record into it.
type halt struct {
	err  atomic.Pointer[error]
	done chan struct{} // closed by the first record

	// live is set once Pebble is open: from then on haltFS absorbs the
	// failures Pebble would panic on and freezes the disk after a halt.
	// Before, a failure is returned to pebble.Open as it is.
	live atomic.Bool
	// closing is closed when the store closes: the calls haltFS parks
	// after a halt fail then, so that Pebble's Close can finish.
	closing   chan struct{}
	closeOnce sync.Once
}

func newHalt() *halt { return &halt{done: make(chan struct{}), closing: make(chan struct{})} }

// close releases the parked calls; it is idempotent.
func (h *halt) close() { h.closeOnce.Do(func() { close(h.closing) }) }

// record keeps cause as the reason for halting, unless one is kept already.
func (h *halt) record(cause error) {
	err := fmt.Errorf("%w: %w", ErrHalted, cause)
	if h.err.CompareAndSwap(nil, &err) {
		close(h.done)
	}
}

// check returns the halt error, or nil while the store may write.
func (h *halt) check() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

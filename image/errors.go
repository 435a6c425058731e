package image

import (
	"errors"
	"fmt"

	"github.com/metatree/metatree/internal/formatversion"
)

var (
	// ErrCorrupt marks every failure to decode an image: bad magic, a
	// checksum mismatch, a truncation, an impossible length.
	ErrCorrupt = errors.New("image: corrupt")
	// ErrUnknownVersion means the image was written in a format version this
	// build does not know (a newer one); it is never guessed at.
	ErrUnknownVersion = fmt.Errorf("image: %w", formatversion.ErrUnknown)
	// ErrClusterMismatch means an image, a peer or a request belongs to
	// another cluster.
	ErrClusterMismatch = errors.New("image: cluster id mismatch")
	// ErrNotFound means no image exists at the requested index.
	ErrNotFound = errors.New("image: not found")
	// ErrNoUsableImage means startup found no image it may load: the journal
	// was compacted past every valid image (or none exists while the journal
	// needs one). The node must be restored from a peer.
	ErrNoUsableImage = errors.New("image: no usable image")
	// ErrUnauthorized means a peer refused the join token (or a request to
	// this node carried a wrong one).
	ErrUnauthorized = errors.New("image: unauthorized")
	// ErrNoPeerImage means a Checkpointer that may not checkpoint by
	// shadow replay found no peer image to adopt: none past this node's
	// newest image and at or below its applied index, or none that
	// downloaded and checked out. The error names each peer and why.
	ErrNoPeerImage = errors.New("image: no peer image to adopt")
	// ErrHalted means the Store stopped writing after an fsync or a rename
	// in its directory failed: the kernel may have dropped the pages that
	// fsync was to persist, and a retried fsync would report success for
	// data that is gone. Every later write is refused; reading and serving
	// the images already durable go on. A restart (a new Store) clears it.
	ErrHalted = errors.New("image: halted by a storage failure")
	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("image: closed")
)

// corruptf returns an error that wraps ErrCorrupt with a reason.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

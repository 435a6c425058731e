package catalog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/imagefmt"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Sentinel errors. Check them with errors.Is: the errors the package returns
// wrap them with the details (which operation, which name, which byte).
var (
	// ErrNotFound: the node (or index) an operation names does not exist.
	ErrNotFound = errors.New("catalog: not found")
	// ErrExists: a create or move target (or index) already exists.
	ErrExists = errors.New("catalog: already exists")
	// ErrConflict: a precondition (exists, absent, modified == N, kind) failed.
	ErrConflict = errors.New("catalog: precondition failed")
	// ErrNotEmpty: a delete without Recursive named a node with children.
	ErrNotEmpty = errors.New("catalog: node has children")
	// ErrInvalid: an operation is not well formed (missing or stray fields,
	// a move into its own subtree, a value over the size limit, ...).
	ErrInvalid = errors.New("catalog: invalid operation")
	// ErrInvalidName: a node name, path, kind or attribute key is not valid.
	ErrInvalidName = errors.New("catalog: invalid name")
	// ErrMalformed: encoded batch bytes cannot be decoded.
	ErrMalformed = codec.ErrMalformed
	// ErrUnknownVersion: a batch or image has a format version this code
	// does not know. It is the catalog's one unknown-version error: the
	// data cannot be read (an applier halts on it). ErrUnsupportedVersion
	// is a caller's request to write a version, refused before anything is
	// encoded.
	ErrUnknownVersion = codec.ErrUnknownVersion
	// ErrUnsupportedVersion: a batch was asked to encode in a format version
	// this code does not write, or that cannot carry one of its fields.
	ErrUnsupportedVersion = errors.New("catalog: unsupported format version")
	// ErrCorrupt: an image body is truncated, fails its checksum, or holds
	// inconsistent content.
	ErrCorrupt = imagefmt.ErrCorrupt
	// ErrCapacity: an operation would take the tree past a limit of its
	// in-memory layout (the storage of child lists); the batch fails and
	// changes nothing. The layout (internal/layout) returns it.
	ErrCapacity = layout.ErrCapacity
	// ErrQuota: the batch would take the tree past its Quota; the batch
	// fails and changes nothing, alike on every replica.
	ErrQuota = errors.New("catalog: quota exceeded")
	// ErrResync: a watcher fell behind (more than its Buffer) or the tree
	// was replaced by Load; it has ended and its owner must re-read and
	// watch again.
	ErrResync = errors.New("catalog: watcher must resync")
	// ErrClosed: the watcher was closed.
	ErrClosed = errors.New("catalog: watcher closed")
	// ErrCompacted: a watch was asked to resume after an index older than
	// the retained log; re-read and watch from the index read at.
	ErrCompacted = errors.New("catalog: index compacted")
	// ErrApplied: Apply was called with a log index at or below the last
	// applied one; the entry is ignored.
	ErrApplied = errors.New("catalog: index already applied")
)

// OpError is the error of a batch that failed: it names the failing
// operation (its position in the batch, its type and path) and wraps the
// reason, one of the sentinels above.
type OpError struct {
	Op   int    // position of the failing operation in the batch, from 0
	Type OpType // its type
	Path string // its path
	Err  error  // the reason; errors.Is works through OpError
}

func (e *OpError) Error() string {
	return fmt.Sprintf("catalog: op %d (%s %q): %s", e.Op, e.Type, e.Path,
		strings.TrimPrefix(e.Err.Error(), "catalog: "))
}

func (e *OpError) Unwrap() error { return e.Err }

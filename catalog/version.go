package catalog

import (
	"bytes"
	"errors"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
	"github.com/metatree/metatree/internal/operr"
)

// LimitFormat makes the tree read batches only up to format version max, as
// a binary whose newest format is max would: a batch of a newer version is
// ErrUnknownVersion and halts its applier (see Result.Halt). It is how a
// test builds an older member, and how a host holds a node at an older
// format; the default is NewestBatchVersion. Call it before the first
// Apply.
func (t *Tree) LimitFormat(max int) {
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	t.dec.max = max
	t.maxFormat.Store(int32(max))
}

// MaxFormat is the newest batch format version the tree reads.
func (t *Tree) MaxFormat() int {
	if m := t.maxFormat.Load(); m != 0 {
		return int(m)
	}
	return NewestBatchVersion
}

// CheckProposal reports whether data is a batch this tree reads, without
// applying it (the journal.ProposalChecker hook: the journal refuses a
// proposal that fails it before it enters the log). It decodes and
// validates the whole batch: bytes that are not a batch are ErrMalformed,
// a format version the tree does not read (see LimitFormat)
// ErrUnknownVersion, an invalid operation an *OpError, each naming what is
// wrong. A batch that passes may still fail when applied (a precondition,
// a missing parent), the same way on every replica. It is safe for
// concurrent use, with Apply too.
func (t *Tree) CheckProposal(data []byte) error {
	d := decoder{max: t.MaxFormat()}
	ops, err := d.decode(data, nil, true)
	if err != nil {
		return err
	}
	return validateOps(ops)
}

// Halt reports whether the batch could not be applied at all because this
// code cannot read it (ErrUnknownVersion): the tree and its index are as
// before, and the entry must not be skipped, or this replica would diverge
// from the ones that can read it. The journal stops its applier on it (the
// journal.Halter contract). A batch that decoded and failed (a
// precondition, a missing parent) is not a halt: it is the same replicated
// no-op on every replica.
func (r *Result) Halt() error {
	if r != nil && errors.Is(r.Err, ErrUnknownVersion) {
		return r.Err
	}
	return nil
}

// matchAttrs checks Cond.Match against the node r: every attribute exists
// with the same encoded value (type and value).
func matchAttrs(s *state, r *layout.Rec, match []kv) error {
	_, attrs := layout.SplitBlob(s.Blob(r))
	var want []byte
	for _, e := range match {
		key, ok := s.keyIdx[e.k]
		var got []byte
		if ok {
			got, ok = codec.AttrValue(attrs, key)
		}
		if !ok {
			return conflict("attribute %q is not set (want it to match)", e.k)
		}
		want = appendValue(want[:0], e.v)
		if !bytes.Equal(got, want) {
			return conflict("attribute %q does not match", e.k)
		}
	}
	return nil
}

// unknownVersion is the Apply result for a batch this code cannot read.
func unknownVersion(index uint64, err error) *Result {
	return &Result{Index: index, Err: operr.Errorf("catalog: batch at index %d: %w", index, err)}
}

package catalog

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/layout"
)

// Quota bounds the size of a tree, so that the cluster refuses writes
// before a frontend runs out of memory (as etcd's quota alarm does). Zero
// fields mean no bound.
//
// A batch that would leave the tree over a bound, and larger than before
// the batch, fails as a whole on every replica alike: it changes nothing,
// Index advances, and Result.Err wraps ErrQuota. The decision reads only
// replicated state (the node count and the bytes of names and attributes,
// which every replica holds identically after the same entries), so every
// replica must run with the same Quota, as every replica runs the same
// code. Batches that shrink the tree (deletes) always pass, so a tree over
// its quota can be brought back under it.
type Quota struct {
	// MaxNodes bounds the nodes, the root included.
	MaxNodes int
	// MaxBytes bounds the approximate in-memory bytes (Usage.Bytes).
	MaxBytes int64
	// Exempt, when set, is a subtree whose batches of format version 4
	// (BatchV4) or later the quota never refuses: such a batch whose
	// every operation names paths at Exempt or under it passes, with what
	// it cascades (owned nodes it deletes or marks orphaned). It is for
	// the host's own records, bounded by the host rather than by its
	// users (a cluster's member records under heartbeat.ClusterPath),
	// which must land even once users have filled the tree; users must
	// not be able to write there.
	//
	// A batch of version 3 or older is judged without the exemption, as
	// code that reads no newer format judges it: during a rolling upgrade
	// the members of the older release then decide it as the others do.
	// Writers of the exempt records encode them in version 4 once every
	// member reads it (the cluster's format version), and the exemption
	// starts with the first such batch, on every replica alike.
	Exempt string
}

// exempts reports whether a batch of format version applies under
// q.Exempt: the version is BatchV4 or later, and every operation stays
// within q.Exempt.
func (q Quota) exempts(version int, ops []rawOp) bool {
	if q.Exempt == "" || version < BatchV4 {
		return false
	}
	within := func(p string) bool {
		return p == q.Exempt || len(p) > len(q.Exempt) && p[len(q.Exempt)] == '/' && p[:len(q.Exempt)] == q.Exempt
	}
	for i := range ops {
		if !within(ops[i].path) || ops[i].to != "" && !within(ops[i].to) {
			return false
		}
	}
	return true
}

// Usage is the size of a tree as Quota counts it.
type Usage struct {
	Nodes int
	// Bytes approximates the tree's memory: a fixed record per node plus
	// the bytes of its name and attributes, each attribute key counted by
	// its name, so that every replica at the same index counts the same.
	// Indexes and child lists are not counted.
	Bytes int64
}

// quotaHolder is the tree's quota, set with SetQuota.
type quotaHolder struct{ p atomic.Pointer[Quota] }

func (h *quotaHolder) get() Quota {
	if q := h.p.Load(); q != nil {
		return *q
	}
	return Quota{}
}

// SetQuota sets the tree's quota (the zero Quota removes it). Set the same
// quota on every replica, before the journal replays into the tree; it
// applies to the batches applied after the call.
func (t *Tree) SetQuota(q Quota) { t.quota.p.Store(&q) }

// Quota returns the quota set with SetQuota.
func (t *Tree) Quota() Quota { return t.quota.get() }

// Usage returns the tree's size as its quota counts it.
func (t *Tree) Usage() Usage {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.s.usage()
}

func (s *state) usage() Usage {
	n := int(s.NSlots) - len(s.Free)
	return Usage{Nodes: n, Bytes: int64(n)*int64(unsafe.Sizeof(layout.Rec{})) + s.size}
}

// checkQuota returns an error wrapping ErrQuota when the batch that took
// the tree from before to after crosses q.
func checkQuota(q Quota, before, after Usage) error {
	if q.MaxNodes > 0 && after.Nodes > q.MaxNodes && after.Nodes > before.Nodes {
		return fmt.Errorf("%w: the batch would leave %d nodes (quota %d)", ErrQuota, after.Nodes, q.MaxNodes)
	}
	if q.MaxBytes > 0 && after.Bytes > q.MaxBytes && after.Bytes > before.Bytes {
		return fmt.Errorf("%w: the batch would leave about %d bytes (quota %d)", ErrQuota, after.Bytes, q.MaxBytes)
	}
	return nil
}

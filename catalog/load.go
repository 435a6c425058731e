package catalog

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/idset"
	"github.com/metatree/metatree/catalog/internal/imagefmt"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// readImage builds a state from an image body. verify=false skips the
// checksums (for fuzzing the decoder behind them).
func readImage(r io.Reader, verify bool) (*state, error) {
	return readImageWith(r, verify, false)
}

// readImageWith is readImage; careful decodes every record with the
// careful decoder, for tests that check the decoder's fast path against
// it.
func readImageWith(r io.Reader, verify, careful bool) (*state, error) {
	dec, err := imagefmt.NewDecoder(r, verify, careful)
	if err != nil {
		return nil, err
	}
	ld := &loader{dec: dec}
	if err := ld.run(); err != nil {
		return nil, err
	}
	ld.s.digest, ld.s.digestFormat = ld.s.computeDigest(NewestDigest), NewestDigest
	return ld.s, nil
}

// The loader builds a state from the records an imagefmt.Decoder decodes:
// it makes their slots, hands them to the linker block by block, and links
// the nodes whose parents came late and the ownerships once every node is
// in.
type loader struct {
	dec *imagefmt.Decoder
	s   *state

	// The records of each block are handed to the linker (see linker).
	lk  *linker
	cur *linkBatch
	// Lengths of the state's outer slices the linker has views of.
	sentSlab, sentChunks, sentKinds int
}

type lateParent struct {
	slot   uint32
	parent uint64 // id
}

// run reads the image, then links the tree. The linker runs beside the
// decoder; whatever happens it has stopped when run returns, and its error,
// about a record decoded before anything the decoder failed on, comes
// first.
func (ld *loader) run() error {
	err := ld.decode()
	if ld.lk != nil {
		if lerr := ld.stopLinker(); lerr != nil {
			return lerr
		}
	}
	if err != nil {
		return err
	}
	if err := ld.link(); err != nil {
		return err
	}
	return ld.linkOwned()
}

// decode makes the state the header describes, with its secondary
// indexes, and adds the records of the blocks up to the end block.
func (ld *loader) decode() error {
	dec := ld.dec
	h := dec.Header()
	s := emptyState(h.Index, h.NextID)
	ld.s = s
	dec.Begin(loadTree{s}, &s.Store, maxBlobBytes)
	// The secondary indexes are filled as the records arrive.
	for _, def := range h.Defs {
		if err := ValidName(def[0]); err != nil {
			return dec.Corrupt("index kind: %s", imagefmt.Detail(err))
		}
		if err := ValidName(def[1]); err != nil {
			return dec.Corrupt("index attribute: %s", imagefmt.Detail(err))
		}
		k, key := s.internKind(def[0]), s.internKey(def[1])
		if s.indexes[[2]uint32{k, key}] != nil {
			return dec.Corrupt("index on (%q, %q) listed twice", def[0], def[1])
		}
		s.addIndex(&secIndex{kind: k, key: key, kindName: s.kinds[k], keyName: s.keys[key], post: map[string]*idset.Set{}})
	}
	ld.startLinker(h.Count)
	for {
		p, done, err := dec.Next()
		if err != nil || done {
			return err
		}
		if err := ld.records(p); err != nil {
			return err
		}
	}
}

// records decodes the records of a block, each into a new slot, and hands
// them to the linker.
func (ld *loader) records(p []byte) error {
	s, dec, b := ld.s, ld.dec, ld.cur
	for off := 0; off < len(p); {
		next := dec.FastRecord(p, off)
		if next == 0 {
			var err error
			if next, err = dec.Record(p, off); err != nil {
				return err
			}
		}
		off = next
		s.size += int64(dec.Size)
		b.parents = append(b.parents, dec.Parent)
		b.vals = append(b.vals, dec.Vals...)
	}
	ld.handOff()
	return nil
}

// loadTree is the state as the image decoder sees it (imagefmt.Tree).
type loadTree struct{ s *state }

func (t loadTree) InternKind(name string) uint32 { return t.s.internKind(name) }
func (t loadTree) InternKey(name string) uint32  { return t.s.internKey(name) }
func (t loadTree) Kinds() []string               { return t.s.kinds }
func (t loadTree) Keys() []string                { return t.s.keys }
func (t loadTree) ValidName(name string) error   { return ValidName(name) }

func (t loadTree) IndexKeys(kind uint32) []uint32 {
	xs := t.s.kindIndexes[kind]
	if len(xs) == 0 {
		return nil
	}
	keys := make([]uint32, len(xs))
	for i, x := range xs {
		keys[i] = x.key
	}
	return keys
}

// The linker. Load decodes records on the caller's goroutine and, block by
// block, hands the new slots to a second goroutine that indexes ids, links
// each node to its parent and adds it to its kind set and secondary
// indexes: the two halves of the work take about as long, and a restore or
// a start-up is waiting for the load. The goroutine lives only inside
// Load, which always stops it before returning (see loader.run).
//
// What each side touches while both run: the decoding side (the
// imagefmt.Decoder and loader.records) appends slots, blobs and interned
// names; the linker writes the id pages, the child lists, the
// kind sets and postings, and the parent and kids fields of slots already
// handed over, which the decoder never touches again. The linker reads
// the state's slab, arena chunks and kind sets through copies of their
// outer slices (the decoder appends to those) made at each hand-over, and
// a blob once written is never written again.
type linker struct {
	s        *state
	count    uint64 // the header's node count
	slab     []*[layout.SlabSize]layout.Rec
	chunks   [][]byte
	kindSets []*idset.Set

	todo chan *linkBatch
	free chan *linkBatch // used batches, for reuse
	done chan struct{}   // closed when the goroutine has returned
	err  error           // the first error; read after done

	// late lists the nodes whose parent comes later in the image (a node
	// moved under a newer one): link links them, and checks the tree for
	// cycles, once every node is in. Every other node's parent is linked
	// as it arrives.
	late []lateParent
	// unsorted lists the parents whose children did not all arrive in
	// increasing name order (with repeats).
	unsorted []uint32
	// The parent of the last node linked (id and slot; id 0 for none),
	// and that node's name.
	lastParentID uint64
	lastParent   uint32
	lastName     []byte
	// chain is the path of the node last linked, each node with its sum
	// of path index terms: an image lists a parent's children together
	// and mostly right after the parent, so the next node's parent is
	// nearly always on it.
	chain []chainLink

	// By state kind: the kind's secondary indexes and their caches.
	xs  [][]*secIndex
	pcs [][]*postCache
}

type chainLink struct {
	slot  uint32
	depth int
	sum   uint64
}

// parentSum returns the sum of the path index terms of ps's path and its
// depth (see linker.chain); ok is false if ps hangs from a node linked
// late.
func (lk *linker) parentSum(ps uint32) (sum uint64, depth int, ok bool) {
	c := lk.chain
	for len(c) > 0 && c[len(c)-1].slot != ps {
		c = c[:len(c)-1]
	}
	if len(c) > 0 {
		lk.chain = c
		l := c[len(c)-1]
		return l.sum, l.depth, true
	}
	sum, depth, ok = lk.s.Paths.PathSum(lk, ps)
	if ok {
		lk.chain = append(c, chainLink{ps, depth, sum})
	}
	return sum, depth, ok
}

// A linkBatch is the slots of one block, handed to the linker.
type linkBatch struct {
	first   uint32
	parents []uint64 // the parent id of each slot from first on
	// For each slot of a kind with secondary indexes, one per index: where
	// the indexed value is in the blob (start<<32 | end; 0 if the node has
	// no such attribute, imagefmt.FindValue if the linker must look).
	vals []uint64
	// New copies of the state's outer slices (nil if unchanged).
	slab     []*[layout.SlabSize]layout.Rec
	chunks   [][]byte
	kindSets []*idset.Set
	// The block reader's position after the block, for errors.
	blocks int
	off    int64
}

func (ld *loader) startLinker(count uint64) {
	lk := &linker{
		s:     ld.s,
		count: count,
		todo:  make(chan *linkBatch, 4),
		free:  make(chan *linkBatch, 8),
		done:  make(chan struct{}),
	}
	ld.lk = lk
	ld.cur = &linkBatch{first: ld.s.NSlots}
	go lk.run()
}

// handOff sends the current batch to the linker and starts the next.
func (ld *loader) handOff() {
	s, b := ld.s, ld.cur
	if len(b.parents) == 0 {
		return
	}
	if len(s.Slab) != ld.sentSlab {
		b.slab, ld.sentSlab = slices.Clone(s.Slab), len(s.Slab)
	}
	if len(s.Arena.Chunks) != ld.sentChunks {
		b.chunks, ld.sentChunks = slices.Clone(s.Arena.Chunks), len(s.Arena.Chunks)
	}
	if len(s.kindSets) != ld.sentKinds {
		b.kindSets, ld.sentKinds = slices.Clone(s.kindSets), len(s.kindSets)
	}
	b.blocks, b.off = ld.dec.Pos()
	n := cap(b.parents)
	ld.lk.todo <- b // b is the linker's now
	select {
	case ld.cur = <-ld.lk.free:
	default:
		ld.cur = &linkBatch{parents: make([]uint64, 0, n)}
	}
	ld.cur.first = s.NSlots
}

// stopLinker hands over what was decoded, waits for the linker to finish
// and returns its error.
func (ld *loader) stopLinker() error {
	ld.handOff()
	close(ld.lk.todo)
	<-ld.lk.done
	return ld.lk.err
}

func (lk *linker) run() {
	defer close(lk.done)
	for b := range lk.todo {
		if b.slab != nil {
			lk.slab = b.slab
		}
		if b.chunks != nil {
			lk.chunks = b.chunks
		}
		if b.kindSets != nil {
			lk.kindSets = b.kindSets
		}
		if lk.err == nil {
			lk.err = lk.link(b)
		}
		b.parents, b.vals = b.parents[:0], b.vals[:0]
		b.slab, b.chunks, b.kindSets = nil, nil, nil
		select {
		case lk.free <- b:
		default:
		}
	}
}

func (lk *linker) At(slot uint32) *layout.Rec {
	return &lk.slab[slot>>layout.SlabBits][slot&(layout.SlabSize-1)]
}

func (lk *linker) blob(r *layout.Rec) []byte {
	off := uint32(r.Blob)
	return lk.chunks[r.Blob>>32][off : off+r.BLen : off+r.BLen]
}

func (lk *linker) KidsOf(slot uint32) []uint32 { return lk.s.Kids.List(lk.At(slot).Kids) }

func (lk *linker) Name(slot uint32) []byte {
	name, _ := layout.SplitBlob(lk.blob(lk.At(slot)))
	return name
}

// link indexes and links the slots of a batch.
func (lk *linker) link(b *linkBatch) error {
	s := lk.s
	// The path index is sized for the header's count once the records
	// decoded are a thousandth of it, and for those records until then:
	// the first block is usually enough, so that the table is built once,
	// and a count the records do not bear out costs at most a thousand
	// times their own index (a few KiB a record).
	have := uint64(b.first) + uint64(len(b.parents))
	want := have
	if lk.count <= 1024*have {
		want = max(have, lk.count)
	}
	s.Paths.Reserve(lk, int(want))
	vi := 0
	for i, parent := range b.parents {
		slot := b.first + uint32(i)
		r := lk.At(slot)
		s.SetSlotOf(r.ID, slot)
		if r.ID == layout.RootID {
			continue
		}
		lk.kindSets[r.Kind].Add(slot)
		if xs := lk.indexesOf(r.Kind); len(xs) > 0 {
			blob := lk.blob(r)
			for j, x := range xs {
				var v []byte
				switch e := b.vals[vi]; e {
				case 0:
				case imagefmt.FindValue:
					_, attrs := layout.SplitBlob(blob)
					v, _ = codec.AttrValue(attrs, x.key)
				default:
					v = blob[e>>32 : uint32(e)]
				}
				vi++
				if v != nil {
					lk.pcs[r.Kind][j].add(x, v, slot)
				}
			}
		}
		if parent >= r.ID {
			r.Parent = layout.NoParent
			lk.late = append(lk.late, lateParent{slot, parent})
			continue
		}
		// Siblings tend to come together: the last parent is
		// remembered, with the name of the child last added to it.
		ps := lk.lastParent
		if parent != lk.lastParentID {
			var ok bool
			if ps, ok = s.SlotOf(parent); !ok {
				return fmt.Errorf("%w: block %d (byte %d): node %d: parent %d does not exist", ErrCorrupt, b.blocks, b.off, r.ID, parent)
			}
		}
		r.Parent = ps
		pr := lk.At(ps)
		name := lk.Name(slot)
		if pr.Kids == 0 {
			h, err := s.Kids.Insert(0, 0, slot, layout.KidRollback)
			if err != nil {
				return err
			}
			pr.Kids = h
		} else {
			// Children mostly arrive in name order: one comparison
			// with the last one keeps the list sorted; loader.link
			// sorts the others.
			k := s.Kids.Region(pr.Kids)
			n := k[0]
			last := lk.lastName
			if ps != lk.lastParent {
				last = lk.Name(k[1+n])
			}
			if bytes.Compare(last, name) >= 0 {
				if u := len(lk.unsorted); u == 0 || lk.unsorted[u-1] != ps {
					lk.unsorted = append(lk.unsorted, ps)
				}
			}
			if n < k[1] {
				k[2+n] = slot
				k[0] = n + 1
			} else {
				h, err := s.Kids.Insert(pr.Kids, int(n), slot, layout.KidRollback)
				if err != nil {
					return err
				}
				pr.Kids = h
			}
		}
		// The node goes in the path index, and on the chain.
		if sum, depth, ok := lk.parentSum(ps); ok {
			sum += s.Paths.Level(depth+1, name)
			s.Paths.Add(s.Paths.Key(sum), slot)
			lk.chain = append(lk.chain, chainLink{slot, depth + 1, sum})
		}
		lk.lastParentID, lk.lastParent, lk.lastName = parent, ps, name
	}
	return nil
}

// indexesOf returns the secondary indexes of a kind (all defined by the
// header, before the linker starts).
func (lk *linker) indexesOf(kind uint32) []*secIndex {
	for int(kind) >= len(lk.xs) {
		xs := lk.s.kindIndexes[uint32(len(lk.xs))]
		pcs := make([]*postCache, len(xs))
		for i := range pcs {
			pcs[i] = new(postCache)
		}
		lk.xs = append(lk.xs, xs)
		lk.pcs = append(lk.pcs, pcs)
	}
	return lk.xs[kind]
}

// postCache is a direct-mapped cache in front of one index's postings map
// for values of up to 8 bytes (ints, short strings): a loaded index sees
// the same few values over and over, and hashing the string for the map
// costs more than the rest of adding the node.
type postCache [1024]struct {
	v   uint64 // the value's bytes, little-endian
	n   int    // its length; 0: empty entry
	set *idset.Set
}

func (c *postCache) add(x *secIndex, val []byte, slot uint32) {
	if len(val) > 8 {
		x.add(val, slot)
		return
	}
	var v uint64
	for i, b := range val {
		v |= uint64(b) << (8 * i)
	}
	e := &c[(v*0x9e3779b97f4a7c15+uint64(len(val)))>>54]
	if e.n != len(val) || e.v != v {
		p := x.post[string(val)]
		if p == nil {
			p = new(idset.Set)
			x.post[string(val)] = p
		}
		e.v, e.n, e.set = v, len(val), p
	}
	e.set.Add(slot)
}

// link links the nodes whose parent came later, sorts the child lists
// that did not arrive in name order, and checks that sibling names are
// unique and that every node hangs from the root.
func (ld *loader) link() error {
	s, lk := ld.s, ld.lk
	for _, l := range lk.late {
		ps, ok := s.SlotOf(l.parent)
		if !ok {
			return ld.dec.Corrupt("node %d: parent %d does not exist", s.At(l.slot).ID, l.parent)
		}
		s.At(l.slot).Parent = ps
		pr := s.At(ps)
		h, err := s.Kids.Insert(pr.Kids, len(s.Kids.List(pr.Kids)), l.slot, layout.KidRollback)
		if err != nil {
			return err
		}
		pr.Kids = h
		lk.unsorted = append(lk.unsorted, ps)
	}
	slices.Sort(lk.unsorted)
	cmp := func(a, b uint32) int { return bytes.Compare(s.Name(a), s.Name(b)) }
	for _, slot := range slices.Compact(lk.unsorted) {
		k := s.KidsOf(slot)
		if strictlySorted(s, k) {
			continue
		}
		slices.SortFunc(k, cmp)
		for j := 1; j < len(k); j++ {
			if cmp(k[j-1], k[j]) == 0 {
				return ld.dec.Corrupt("two children of node %d named %q", s.At(slot).ID, s.Name(k[j]))
			}
		}
	}
	if len(lk.late) == 0 {
		s.Paths.Flush()
		// Every parent came before its children, starting from the root
		// (the first record): all are reachable, no cycle is possible.
		return nil
	}
	// Every node must be reachable from the root (no cycles).
	seen := 1
	stack := []uint32{layout.RootSlot}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		kids := s.KidsOf(n)
		seen += len(kids)
		stack = append(stack, kids...)
	}
	if seen != int(s.NSlots) {
		return ld.dec.Corrupt("%d of %d nodes are not reachable from the root (a parent cycle)", int(s.NSlots)-seen, s.NSlots)
	}
	// The linker left out the nodes below those linked late.
	s.Paths.Rebuild(s, layout.BucketsFor(seen-1))
	return nil
}

// strictlySorted reports whether the names of k increase strictly (sorted,
// no two equal): the usual case, settled in one comparison per child.
func strictlySorted(s *state, k []uint32) bool {
	prev := s.Name(k[0])
	for _, c := range k[1:] {
		cur := s.Name(c)
		if bytes.Compare(prev, cur) >= 0 {
			return false
		}
		prev = cur
	}
	return true
}

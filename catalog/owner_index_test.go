package catalog

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkOwnerIndex fails unless the owner index of tr is consistent: every
// owned slot is a live node in exactly one of its owner's sets, every
// owner is live and named by its id, and the orphan count is right.
func checkOwnerIndex(t *testing.T, tr *Tree) {
	t.Helper()
	s := tr.s
	w := &s.own
	n, orphans := 0, 0
	for owner, o := range w.by {
		require.NotZero(t, s.At(owner).ID, "owner slot %d is free", owner)
		require.Equal(t, s.At(owner).ID, o.id, "owner slot %d", owner)
		require.NotZero(t, o.del.Len()+o.orphan.Len(), "owner %d owns nothing yet has sets", o.id)
		check := func(orphan bool) func(uint32) {
			return func(slot uint32) {
				require.NotZero(t, s.At(slot).ID, "owned slot %d is free", slot)
				got, ok := w.back.Get(slot)
				require.True(t, ok, "owned slot %d is not in back", slot)
				require.Equal(t, owner, got, "owned slot %d", slot)
				require.False(t, o.set(!orphan).Contains(slot), "slot %d in both sets", slot)
				n++
				if orphan {
					orphans++
				}
			}
		}
		o.del.Each(check(false))
		o.orphan.Each(check(true))
	}
	require.Equal(t, n, w.back.Len(), "back holds links no set does")
	require.Equal(t, orphans, w.orphans)
}

// ownModel is what the owner index must say: the owned nodes by path,
// with the member that owns each and whether it asks for a mark.
type ownModel struct {
	version map[string]uint64 // member path -> its current version (0: deleted)
	nodes   map[string]bool   // the nodes under /d
	owned   map[string]Owner  // owned node -> owner (Version unused)
}

// end applies the end of member m's version to the model: the nodes it
// owns go with their subtrees, or stay marked; the outcome does not
// depend on the order the cascade takes them in, since members own
// nothing themselves.
func (m *ownModel) end(member string) {
	var gone []string
	for p, o := range m.owned {
		if o.Path == member && !o.Orphan {
			gone = append(gone, p)
		}
	}
	for p, o := range m.owned {
		if o.Path == member && o.Orphan {
			delete(m.owned, p) // marked, no longer owned
		}
	}
	for _, p := range gone {
		m.remove(p)
	}
}

// remove deletes p and its subtree from the model.
func (m *ownModel) remove(p string) {
	for q := range m.nodes {
		if q == p || under(q, p) {
			delete(m.nodes, q)
			delete(m.owned, q)
		}
	}
}

func TestOwnerIndexAgreesWithAModelAcrossCascadesAndRollbacks(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { ownerIndexAgainstModel(t, seed, 300) })
	}
}

// FuzzOwnerIndexAgainstModel runs the model check from fuzzed seeds, with
// fewer batches a run.
func FuzzOwnerIndexAgainstModel(f *testing.F) {
	f.Add(uint64(5))
	f.Fuzz(func(t *testing.T, seed uint64) { ownerIndexAgainstModel(t, seed, 60) })
}

// ownerIndexAgainstModel applies batches random batches from seed.
func ownerIndexAgainstModel(t *testing.T, seed uint64, batches int) {
	r := rand.New(rand.NewPCG(seed, 36))
	tr := New()
	members := []string{"/m0", "/m1", "/m2"}
	m := &ownModel{version: map[string]uint64{}, nodes: map[string]bool{}, owned: map[string]Owner{}}
	ops := []Op{{Type: OpCreate, Path: "/d", Kind: "dir"}}
	for _, p := range members {
		ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "member"})
		m.version[p] = 1
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	next := 0
	for index := uint64(2); index < uint64(batches); index++ {
		var ops []Op
		mm := &ownModel{version: maps.Clone(m.version), nodes: maps.Clone(m.nodes), owned: maps.Clone(m.owned)}
		// An owner for a create, or none.
		owner := func() Owner {
			p := members[r.IntN(len(members))]
			if r.IntN(4) == 0 || mm.version[p] == 0 {
				return Owner{}
			}
			return Owner{Path: p, Version: mm.version[p], Orphan: r.IntN(3) == 0}
		}
		create := func(p string) {
			o := owner()
			ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "task", Owner: o})
			mm.nodes[p] = true
			if !o.zero() {
				mm.owned[p] = Owner{Path: o.Path, Orphan: o.Orphan}
			}
		}
		for range 1 + r.IntN(4) {
			switch k := r.IntN(10); {
			case k < 4: // owned tasks, some with an owned child
				for range 1 + r.IntN(20) {
					p := fmt.Sprintf("/d/x%04d", next)
					next++
					create(p)
					if r.IntN(3) == 0 {
						create(p + "/c")
					}
				}
			case k < 6: // ordinary deletes
				if len(mm.nodes) == 0 {
					continue
				}
				ps := slices.Sorted(maps.Keys(mm.nodes))
				p := ps[r.IntN(len(ps))]
				ops = append(ops, Op{Type: OpDelete, Path: p, Recursive: true})
				mm.remove(p)
			case k < 8: // a version ends by an update
				p := members[r.IntN(len(members))]
				if mm.version[p] == 0 {
					continue
				}
				ops = append(ops, Op{Type: OpUpdate, Path: p, Set: map[string]Value{"gen": Int(int64(index))}})
				mm.end(p)
				mm.version[p] = index
			case k < 9: // or by a delete, and the member comes back
				p := members[r.IntN(len(members))]
				if mm.version[p] == 0 {
					ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "member"})
					mm.version[p] = index
					continue
				}
				ops = append(ops, Op{Type: OpDelete, Path: p})
				mm.end(p)
				mm.version[p] = 0
			default: // an unowned node
				p := fmt.Sprintf("/d/x%04d", next)
				next++
				ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "task"})
				mm.nodes[p] = true
			}
		}
		if len(ops) == 0 {
			ops = append(ops, Op{Type: OpCheck, Path: "/d"})
		}
		fail := r.IntN(4) == 0
		if fail {
			ops = append(ops, Op{Type: OpCreate, Path: "/missing/x", Kind: "task"})
		}
		var before string
		if fail {
			before = dump(tr)
		}
		digest := tr.s.digest
		res := tr.Apply(index, encode(t, ops...)).(*Result)
		if fail {
			require.ErrorIs(t, res.Err, ErrNotFound, "batch %d", index)
			require.Equal(t, before, dump(tr), "batch %d rolled back", index)
			require.Equal(t, digest, tr.s.digest, "batch %d rolled back", index)
		} else {
			require.NoError(t, res.Err, "batch %d", index)
			m = mm
		}
		checkOwnerIndex(t, tr)
		checkDigest(t, tr)
		if len(m.owned) != tr.ownedCount() {
			for _, o := range ops {
				t.Logf("op %v %s owner=%+v", o.Type, o.Path, o.Owner)
			}
			for p, o := range m.owned {
				got, ok := tr.Owned(p)
				t.Logf("model %s %+v; tree %+v %v", p, o, got, ok)
			}
			t.Log(dump(tr))
		}
		require.Equal(t, len(m.owned), tr.ownedCount(), "batch %d", index)
		for p := range m.nodes {
			mustExist(t, tr, p, true)
			got, ok := tr.Owned(p)
			want, owned := m.owned[p]
			require.Equal(t, owned, ok, "batch %d: %s owned", index, p)
			if owned {
				require.Equal(t, Owner{Path: want.Path, Version: m.version[want.Path], Orphan: want.Orphan}, got, "batch %d: %s", index, p)
			}
		}
		require.Equal(t, len(m.nodes), len(tr.Children("/d"))+countGrandchildren(tr, "/d"), "batch %d: nodes under /d", index)
		if index%100 == 0 {
			ownerIndexSurvivesAnImage(t, tr)
		}
	}
}

func countGrandchildren(tr *Tree, p string) int {
	n := 0
	for _, c := range tr.Children(p) {
		n += len(tr.Children(p + "/" + c))
	}
	return n
}

// ownerIndexSurvivesAnImage fails unless a tree loaded from tr's image
// holds the same ownerships, an index built from them alike, and the same
// digest.
func ownerIndexSurvivesAnImage(t *testing.T, tr *Tree) {
	t.Helper()
	var img bytes.Buffer
	require.NoError(t, tr.Save(&img))
	tr2 := New()
	require.NoError(t, tr2.Load(&img))
	checkOwnerIndex(t, tr2)
	require.Equal(t, tr.s.imageLinks(), tr2.s.imageLinks())
	require.Equal(t, tr.s.own.orphans, tr2.s.own.orphans)
	require.Equal(t, tr.s.digest, tr2.s.digest)
}

func TestOwnerIndexTakesAtMost16BytesAnOwnedNode(t *testing.T) {
	const n = 20_000
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/m", Kind: "member"}, {Type: OpCreate, Path: "/o", Kind: "dir"}}})
	for i := 0; i < n; i += 1000 {
		var ops []Op
		for j := i; j < i+1000; j++ {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/o/t%07d", j), Kind: "task", Owner: Owner{Path: "/m", Version: 1, Orphan: j%10 == 0}})
		}
		mustApply(t, tr, uint64(2+i/1000), Batch{Ops: ops})
	}
	w := &tr.s.own
	bytes := w.back.Bytes()
	for _, o := range w.by {
		bytes += o.del.Bytes() + o.orphan.Bytes()
	}
	require.LessOrEqual(t, float64(bytes)/n, 16.0, "owner index bytes an owned node")
}

func TestAVersionEndedByTheLastOperationKeepsNoUndoPerOwnedNode(t *testing.T) {
	tr, index := ownedBenchTree(t, 500, true)
	res := tr.Apply(index, encode(t, Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}})).(*Result)
	require.NoError(t, res.Err)
	require.Zero(t, tr.ownedCount())
	require.Empty(t, tr.Children("/o"))
	// The owner's update is the batch's one undo record.
	require.Len(t, tr.undo, 1)
	checkDigest(t, tr)
}

func TestAVersionEndedBeforeTheLastOperationRollsBackWhole(t *testing.T) {
	tr, index := ownedBenchTree(t, 500, true)
	before, digest := dump(tr), tr.s.digest
	res := tr.Apply(index, encode(t,
		Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}},
		Op{Type: OpCreate, Path: "/missing/x", Kind: "task"},
	)).(*Result)
	require.ErrorIs(t, res.Err, ErrNotFound)
	require.Equal(t, before, dump(tr))
	require.Equal(t, digest, tr.s.digest)
	require.Equal(t, 500, tr.ownedCount())
	checkOwnerIndex(t, tr)
}

func TestMarksThatMayCrossTheByteQuotaKeepTheUndoAndRollBack(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/m", Kind: "member"}}})
	var ops []Op
	for i := range 50 {
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/t%02d", i), Kind: "task", Owner: Owner{Path: "/m", Version: 1, Orphan: true}})
	}
	mustApply(t, tr, 2, Batch{Ops: ops})
	before, digest := dump(tr), tr.s.digest
	// The marks add bytes the quota has no room for: the check after the
	// cascade fails, and the batch must come undone, cascade included.
	tr.SetQuota(Quota{MaxBytes: tr.Usage().Bytes + 10})
	res := tr.Apply(3, encode(t, Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}})).(*Result)
	require.ErrorIs(t, res.Err, ErrQuota)
	require.Equal(t, before, dump(tr))
	require.Equal(t, digest, tr.s.digest)
	require.Equal(t, 50, tr.ownedCount())
	checkOwnerIndex(t, tr)
	// With room for them, the marks are made.
	tr.SetQuota(Quota{MaxBytes: tr.Usage().Bytes + 50*maxMarkBytes})
	mustApply(t, tr, 4, Batch{Ops: []Op{{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}}}})
	require.Zero(t, tr.ownedCount())
	n, ok := tr.Get("/t07")
	require.True(t, ok)
	require.Equal(t, String("4 "+OrphanOwnerChanged), n.Attrs[OrphanedAttr])
	checkDigest(t, tr)
}

func TestAnOrphanMarkAddsAtMostMaxMarkBytes(t *testing.T) {
	tr := New()
	const index = uint64(1) << 62 // the longest index a mark records
	mustApply(t, tr, index-2, Batch{Ops: []Op{{Type: OpCreate, Path: "/m", Kind: "member"}}})
	// 127 attributes: the mark lengthens the attribute count.
	set := map[string]Value{}
	for i := range 127 {
		set[fmt.Sprintf("a%03d", i)] = Int(1)
	}
	mustApply(t, tr, index-1, Batch{Ops: []Op{{Type: OpCreate, Path: "/t", Kind: "task", Set: set, Owner: Owner{Path: "/m", Version: index - 2, Orphan: true}}}})
	before := tr.Usage().Bytes
	mustApply(t, tr, index, Batch{Ops: []Op{{Type: OpDelete, Path: "/m"}}})
	n, ok := tr.Get("/t")
	require.True(t, ok)
	require.Equal(t, String(fmt.Sprintf("%d %s", index, OrphanOwnerDeleted)), n.Attrs[OrphanedAttr])
	// The member's rec and blob went; the mark came.
	grew := tr.Usage().Bytes - before + memberBytes(t)
	require.Positive(t, grew)
	require.LessOrEqual(t, grew, int64(maxMarkBytes))
}

// memberBytes is what a node like /m adds to Usage.Bytes.
func memberBytes(t *testing.T) int64 {
	tr := New()
	u := tr.Usage().Bytes
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/m", Kind: "member"}}})
	return tr.Usage().Bytes - u
}

func TestAnOwnerIsFoundWhenTheSameBatchCreatedItAndNotOnceItDeletedIt(t *testing.T) {
	tr := New()
	mustApply(t, tr, 5, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/w", Kind: "dir"},
		{Type: OpCreate, Path: "/w/m", Kind: "member"},
		{Type: OpCreate, Path: "/x", Kind: "task", Owner: Owner{Path: "/w/m", Version: 5}},
	}})
	o, ok := tr.Owned("/x")
	require.True(t, ok)
	require.Equal(t, Owner{Path: "/w/m", Version: 5}, o)
	res := tr.Apply(6, encode(t,
		Op{Type: OpDelete, Path: "/w", Recursive: true},
		Op{Type: OpCreate, Path: "/y", Kind: "task", Owner: Owner{Path: "/w/m", Version: 5}},
	)).(*Result)
	require.ErrorIs(t, res.Err, ErrConflict)
	mustExist(t, tr, "/x", true)
	checkOwnerIndex(t, tr)
}

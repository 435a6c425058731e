package catalog_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metatree/metatree/catalog"
)

// TestQuotaRefusesBatchesAlikeOnEveryReplica: a batch that would take the
// tree past its node or byte quota fails whole with ErrQuota and changes
// nothing but Index; a replica that loaded the same state from an image
// decides every batch the same way; a delete passes even over the quota;
// the collector shows the headroom.
func TestQuotaRefusesBatchesAlikeOnEveryReplica(t *testing.T) {
	for _, tc := range []struct {
		name  string
		quota catalog.Quota
	}{
		{"nodes", catalog.Quota{MaxNodes: 4}},
		{"bytes", catalog.Quota{MaxBytes: 400}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := catalog.New()
			a.SetQuota(tc.quota)
			if res := apply(a, 1, catalog.Op{Type: catalog.OpCreate, Path: "/db", Kind: "database"}); res.Err != nil {
				t.Fatal(res.Err)
			}
			// A replica that starts from an image of a.
			var img bytes.Buffer
			if err := a.Save(&img); err != nil {
				t.Fatal(err)
			}
			b := catalog.New()
			if err := b.Load(&img); err != nil {
				t.Fatal(err)
			}
			b.SetQuota(tc.quota)
			if a.Usage() != b.Usage() {
				t.Fatalf("usage after load %+v, want %+v", b.Usage(), a.Usage())
			}

			var refused uint64
			for i := uint64(2); i < 12; i++ {
				ops := []catalog.Op{{Type: catalog.OpCreate, Path: fmt.Sprintf("/db/t%d", i), Kind: "table",
					Set: map[string]catalog.Value{"comment": catalog.String(strings.Repeat("x", 40))}}}
				before := a.Usage()
				ra, rb := apply(a, i, ops...), apply(b, i, ops...)
				if errors.Is(ra.Err, catalog.ErrQuota) != errors.Is(rb.Err, catalog.ErrQuota) {
					t.Fatalf("batch %d: replicas disagree: %v vs %v", i, ra.Err, rb.Err)
				}
				if ra.Err == nil {
					continue
				}
				if !errors.Is(ra.Err, catalog.ErrQuota) {
					t.Fatalf("batch %d: %v, want ErrQuota", i, ra.Err)
				}
				if refused == 0 {
					refused = i
				}
				if _, ok := a.Get(fmt.Sprintf("/db/t%d", i)); ok || a.Usage() != before || a.Index() != i {
					t.Fatalf("refused batch %d changed the tree (usage %+v, was %+v; index %d)", i, a.Usage(), before, a.Index())
				}
			}
			if refused == 0 {
				t.Fatal("the quota never refused a batch")
			}
			if a.Usage() != b.Usage() {
				t.Fatalf("replicas diverged: %+v vs %+v", a.Usage(), b.Usage())
			}
			q, u := a.Quota(), a.Usage()
			name, headroom := "metatree_catalog_quota_nodes_headroom", q.MaxNodes-u.Nodes
			if q.MaxBytes > 0 {
				name, headroom = "metatree_catalog_quota_bytes_headroom", int(q.MaxBytes-u.Bytes)
			}
			if headroom < 0 {
				t.Fatalf("usage %+v over quota %+v", u, q)
			}
			if got := gauge(t, a, name); got != float64(headroom) {
				t.Fatalf("%s = %v, want %d", name, got, headroom)
			}

			// Shrinking always passes, even with the quota lowered under
			// the current size.
			a.SetQuota(catalog.Quota{MaxNodes: 1, MaxBytes: 1})
			if res := apply(a, 20, catalog.Op{Type: catalog.OpDelete, Path: "/db/t2"}); res.Err != nil {
				t.Fatalf("a delete over the quota: %v", res.Err)
			}
		})
	}
}

// gauge returns the value of the tree's gauge name, failing if absent.
func gauge(t *testing.T, tree *catalog.Tree, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tree.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s", name)
	return 0
}

// applyVersion applies ops at index as one batch encoded in format
// version.
func applyVersion(t *testing.T, tr *catalog.Tree, index uint64, version int, ops ...catalog.Op) *catalog.Result {
	t.Helper()
	data, err := catalog.Batch{Ops: ops}.EncodeVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Apply(index, data).(*catalog.Result)
}

// TestQuotaExemptSubtreePassesWhenTheTreeIsFull: once users have filled
// the tree, a batch (of format version 4) wholly under Quota.Exempt still
// applies on every replica, while one that also writes elsewhere, or
// moves a node out, is refused.
func TestQuotaExemptSubtreePassesWhenTheTreeIsFull(t *testing.T) {
	for _, q := range []catalog.Quota{{MaxNodes: 3, Exempt: "/_cluster"}, {MaxBytes: 300, Exempt: "/_cluster"}} {
		tr := catalog.New()
		tr.SetQuota(q)
		idx := fillUnderExempt(t, tr, q)
		idx++
		if res := applyVersion(t, tr, idx, catalog.BatchV4, catalog.Op{Type: catalog.OpCreate, Path: "/_cluster/m1", Kind: "member",
			Set: map[string]catalog.Value{"epoch": catalog.String(strings.Repeat("e", 36))}}); res.Err != nil {
			t.Fatalf("%+v: a create under the exempt subtree of a full tree: %v", q, res.Err)
		}
		idx++
		if res := applyVersion(t, tr, idx, catalog.BatchV4, catalog.Op{Type: catalog.OpUpdate, Path: "/_cluster/m1",
			Set: map[string]catalog.Value{"died": catalog.Int(3)}}); res.Err != nil {
			t.Fatalf("%+v: an update under the exempt subtree of a full tree: %v", q, res.Err)
		}
		for _, ops := range [][]catalog.Op{
			{{Type: catalog.OpCreate, Path: "/_cluster/m2", Kind: "member"}, {Type: catalog.OpCreate, Path: "/v", Kind: "dir"}},
			{{Type: catalog.OpCreate, Path: "/_clusterx", Kind: "dir"}},
		} {
			idx++
			if res := applyVersion(t, tr, idx, catalog.BatchV4, ops...); !errors.Is(res.Err, catalog.ErrQuota) {
				t.Fatalf("%+v: batch %+v reaching out of the exempt subtree: %v, want ErrQuota", q, ops, res.Err)
			}
		}
	}
}

// TestQuotaExemptsOnlyBatchesOfVersion4: a full tree with Quota.Exempt
// set judges a batch of format version 3 or older under the exempt
// subtree without the exemption, as code that reads no newer format does
// (it refuses it), and admits the same operations encoded in version 4:
// replicas of both releases decide every version-3 batch alike.
func TestQuotaExemptsOnlyBatchesOfVersion4(t *testing.T) {
	for _, q := range []catalog.Quota{{MaxNodes: 3, Exempt: "/_cluster"}, {MaxBytes: 300, Exempt: "/_cluster"}} {
		tr := catalog.New()
		tr.SetQuota(q)
		// The older release: the same quota without the exemption, and
		// no format past version 3.
		old := catalog.New()
		old.LimitFormat(catalog.BatchV3)
		old.SetQuota(catalog.Quota{MaxNodes: q.MaxNodes, MaxBytes: q.MaxBytes})
		idx := fillUnderExempt(t, tr, q)
		if got := fillUnderExempt(t, old, q); got != idx {
			t.Fatalf("%+v: the older tree filled at %d, the newer at %d", q, got, idx)
		}
		create := catalog.Op{Type: catalog.OpCreate, Path: "/_cluster/m1", Kind: "member",
			Set: map[string]catalog.Value{"epoch": catalog.String(strings.Repeat("e", 36))}}
		for _, v := range []int{catalog.BatchV1, catalog.BatchV3} {
			idx++
			for _, r := range []*catalog.Tree{tr, old} {
				if res := applyVersion(t, r, idx, v, create); !errors.Is(res.Err, catalog.ErrQuota) {
					t.Fatalf("%+v: a version-%d batch under the exempt subtree of a full tree: %v, want ErrQuota", q, v, res.Err)
				}
			}
			if _, ok := tr.Get("/_cluster/m1"); ok {
				t.Fatalf("%+v: a version-%d batch under the exempt subtree passed the quota", q, v)
			}
			_, want := old.Digest()
			if _, got := tr.Digest(); got != want {
				t.Fatalf("%+v: after a version-%d batch the digests differ: %v, older release %v", q, v, got, want)
			}
		}
		idx++
		if res := applyVersion(t, tr, idx, catalog.BatchV4, create); res.Err != nil {
			t.Fatalf("%+v: the same create in version 4: %v", q, res.Err)
		}
		if _, ok := tr.Get("/_cluster/m1"); !ok {
			t.Fatalf("%+v: the version-4 create left no node", q)
		}
	}
}

// fillUnderExempt creates q.Exempt in tr, then fills tr with user nodes
// until the quota refuses one, and returns the index of that refusal.
func fillUnderExempt(t *testing.T, tr *catalog.Tree, q catalog.Quota) uint64 {
	t.Helper()
	if res := apply(tr, 1, catalog.Op{Type: catalog.OpCreate, Path: q.Exempt, Kind: "dir"}); res.Err != nil {
		t.Fatal(res.Err)
	}
	for idx := uint64(2); ; idx++ {
		res := apply(tr, idx, catalog.Op{Type: catalog.OpCreate, Path: fmt.Sprintf("/u%d", idx), Kind: "dir",
			Set: map[string]catalog.Value{"c": catalog.String(strings.Repeat("x", 40))}})
		if errors.Is(res.Err, catalog.ErrQuota) {
			return idx
		}
		if res.Err != nil || idx > 100 {
			t.Fatalf("%+v: filling the tree at %d: %v", q, idx, res.Err)
		}
	}
}

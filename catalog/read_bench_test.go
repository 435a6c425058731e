package catalog

import (
	"github.com/metatree/metatree/internal/benchshape"

	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// The read benchmarks run at three scales of the Doris shape (dorisFull, 4
// million nodes): a tenth, one and four times, scaling the number of
// databases so that every level keeps its fanout and only the catalog's
// size changes. Each looks nodes up in a seeded random order over the whole
// catalog, as query planning does, so that the larger catalogs pay the
// cache misses a fixed hot path would hide.
var readScales = []struct {
	name  string
	shape benchshape.Doris
}{
	{"scale=0.1x", benchshape.Doris{DBs: 5, Tables: 50, Parts: 4, Tablets: 100, Replicas: 3, Workers: 100}},
	{"scale=1x", dorisFull},
	{"scale=4x", benchshape.Doris{DBs: 200, Tables: 50, Parts: 4, Tablets: 100, Replicas: 3, Workers: 100}},
}

// readTrees caches one tree a scale across the read benchmarks: building
// the 4x catalog takes a while.
var readTrees struct {
	sync.Mutex
	m map[benchshape.Doris]*Tree
}

func readTree(b *testing.B, d benchshape.Doris) *Tree {
	readTrees.Lock()
	defer readTrees.Unlock()
	if tr := readTrees.m[d]; tr != nil {
		return tr
	}
	tr := New()
	buildDoris(b, d, tr, 1, 1000)
	// The build's garbage is collected now, not by a collection that would
	// run through the first benchmark's reads.
	runtime.GC()
	if readTrees.m == nil {
		readTrees.m = map[benchshape.Doris]*Tree{}
	}
	readTrees.m[d] = tr
	return tr
}

// replicaPaths returns n paths of random replicas of the shape.
func replicaPaths(d benchshape.Doris, n int) []string {
	r := rand.New(rand.NewPCG(3, 4))
	out := make([]string, n)
	for i := range out {
		db, t, p := r.IntN(d.DBs), r.IntN(d.Tables), r.IntN(d.Parts)
		tablet := 1 + ((db*d.Tables+t)*d.Parts+p)*d.Tablets + r.IntN(d.Tablets)
		out[i] = fmt.Sprintf("/db%02d/tbl%02d/p%d/tablet%d/r%d", db, t, p, tablet, r.IntN(d.Replicas))
	}
	return out
}

// partitionPaths returns n paths of random partitions of the shape.
func partitionPaths(d benchshape.Doris, n int) []string {
	r := rand.New(rand.NewPCG(5, 6))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("/db%02d/tbl%02d/p%d", r.IntN(d.DBs), r.IntN(d.Tables), r.IntN(d.Parts))
	}
	return out
}

const readSample = 1 << 14

// BenchmarkGetPath looks up replicas by path: keys=random over the whole
// catalog (cold: cache misses dominate), keys=hot over three paths (in
// cache); api=view through Tree.Read (the zero-allocation path), api=copy
// through Tree.Get.
func BenchmarkGetPath(b *testing.B) {
	for _, sc := range readScales {
		b.Run(sc.name, func(b *testing.B) {
			tr := readTree(b, sc.shape)
			random := replicaPaths(sc.shape, readSample)
			hot := make([]string, readSample)
			for i := range hot {
				hot[i] = random[i%3]
			}
			for _, keys := range []struct {
				name  string
				paths []string
			}{{"keys=random", random}, {"keys=hot", hot}} {
				paths := keys.paths
				b.Run(keys.name+"/api=view", func(b *testing.B) {
					b.ReportAllocs()
					i, found := 0, 0
					read := func(r Reader) {
						if v, ok := r.Get(paths[i%readSample]); ok && v.ID() != 0 {
							found++
						}
					}
					for b.Loop() {
						tr.Read(read)
						i++
					}
					if found != i {
						b.Fatalf("found %d of %d", found, i)
					}
				})
				b.Run(keys.name+"/api=copy", func(b *testing.B) {
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if _, ok := tr.Get(paths[i%readSample]); !ok {
							b.Fatal("missing")
						}
						i++
					}
				})
			}
		})
	}
}

// BenchmarkGetID looks up random nodes by id.
func BenchmarkGetID(b *testing.B) {
	for _, sc := range readScales {
		b.Run(sc.name, func(b *testing.B) {
			tr := readTree(b, sc.shape)
			r := rand.New(rand.NewPCG(7, 8))
			ids := make([]uint64, readSample)
			for i := range ids {
				ids[i] = 2 + r.Uint64N(uint64(sc.shape.Nodes()-1))
			}
			b.Run("api=view", func(b *testing.B) {
				b.ReportAllocs()
				i, found := 0, 0
				read := func(r Reader) {
					if v, ok := r.GetID(ids[i%readSample]); ok && v.ID() != 0 {
						found++
					}
				}
				for b.Loop() {
					tr.Read(read)
					i++
				}
				if found != i {
					b.Fatalf("found %d of %d", found, i)
				}
			})
			b.Run("api=copy", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, ok := tr.GetID(ids[i%readSample]); !ok {
						b.Fatal("missing")
					}
					i++
				}
			})
		})
	}
}

// BenchmarkChildren iterates the tablets of a random partition (reading
// each one's name), reporting ns per node yielded. api=view finds the
// partition by id (the ids of the sampled partitions are collected before
// the timer starts), so that ns/node measures the iteration rather than a
// random Get by path; api=copy is Tree.Children, which takes a path, so its
// figure includes that Get.
func BenchmarkChildren(b *testing.B) {
	for _, sc := range readScales {
		b.Run(sc.name, func(b *testing.B) {
			tr := readTree(b, sc.shape)
			paths := partitionPaths(sc.shape, readSample)
			ids := make([]uint64, len(paths))
			for i, p := range paths {
				n, ok := tr.Get(p)
				if !ok {
					b.Fatalf("no partition %s", p)
				}
				ids[i] = n.ID
			}
			b.Run("api=view", func(b *testing.B) {
				b.ReportAllocs()
				i, nodes := 0, 0
				read := func(r Reader) {
					p, _ := r.GetID(ids[i%readSample])
					for c := range p.Children() {
						nodes += min(len(c.Name()), 1)
					}
				}
				for b.Loop() {
					tr.Read(read)
					i++
				}
				if nodes != i*sc.shape.Tablets {
					b.Fatalf("yielded %d nodes in %d reads", nodes, i)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nodes), "ns/node")
			})
			b.Run("api=copy", func(b *testing.B) {
				b.ReportAllocs()
				i, nodes := 0, 0
				for b.Loop() {
					nodes += len(tr.Children(paths[i%readSample]))
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nodes), "ns/node")
			})
		})
	}
}

// BenchmarkFindIndexed iterates the replicas on one worker through the
// secondary index (reading each one's version), reporting ns per node
// yielded. api=copy is Tree.Find, which materialises and sorts them.
func BenchmarkFindIndexed(b *testing.B) {
	for _, sc := range readScales {
		b.Run(sc.name, func(b *testing.B) {
			tr := readTree(b, sc.shape)
			d := sc.shape
			perWorker := d.DBs * d.Tables * d.Parts * d.Tablets * d.Replicas / d.Workers
			b.Run("api=view", func(b *testing.B) {
				b.ReportAllocs()
				i, nodes := 0, 0
				read := func(r Reader) {
					for v := range r.Find("replica", "worker", Int(int64(i%d.Workers))) {
						if ver, ok := v.Attr("version"); ok && ver.Int64() > 0 {
							nodes++
						}
					}
				}
				for b.Loop() {
					tr.Read(read)
					i++
				}
				if nodes != i*perWorker {
					b.Fatalf("yielded %d nodes in %d reads, want %d each", nodes, i, perWorker)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nodes), "ns/node")
			})
			b.Run("api=copy", func(b *testing.B) {
				b.ReportAllocs()
				i, nodes := 0, 0
				for b.Loop() {
					nodes += len(tr.Find("replica", "worker", Int(int64(i%d.Workers))))
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nodes), "ns/node")
			})
		})
	}
}

package catalog

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metatree/metatree/internal/benchshape"
)

// dorisFull is the Doris-scale catalog of BenchmarkDorisScale.
var dorisFull = benchshape.Full

// buildDoris applies the shape d to tr through Apply, in encoded batches of
// about batchOps operations starting at index first; it returns the next
// index, the number of operations and the wall time spent inside Apply.
func buildDoris(tb testing.TB, d benchshape.Doris, tr *Tree, first uint64, batchOps int) (uint64, int, time.Duration) {
	idx, n, wall, _ := buildDorisCPU(tb, d, tr, first, batchOps)
	return idx, n, wall
}

// buildDorisCPU is buildDoris that also returns the process CPU time spent
// inside Apply. A batch ends after the tablet whose replicas fill it.
func buildDorisCPU(tb testing.TB, d benchshape.Doris, tr *Tree, first uint64, batchOps int) (uint64, int, time.Duration, time.Duration) {
	index := first
	// Batches are encoded with the same encoder as Batch.Encode, from
	// reused buffers, so that generating three million operations does not
	// make garbage that the collector would charge to Apply.
	var ops []rawOp
	var kvs []kv
	var buf []byte
	var total int
	var applyTime, applyCPU time.Duration
	flush := func() {
		if len(ops) == 0 {
			return
		}
		buf = appendOps(buf[:0], ops, BatchV1)
		cpu := benchshape.ProcessCPU()
		start := time.Now()
		res := tr.Apply(index, buf).(*Result)
		applyTime += time.Since(start)
		applyCPU += benchshape.ProcessCPU() - cpu
		if res.Err != nil {
			tb.Fatalf("batch at %d: %v", index, res.Err)
		}
		index++
		total += len(ops)
		ops, kvs = ops[:0], kvs[:0]
	}
	ops = append(ops, rawOp{typ: OpCreateIndex, kind: "replica", attr: "worker"})
	d.Walk(func(n benchshape.Node) {
		var op rawOp
		op, kvs = dorisCreate(n, kvs)
		ops = append(ops, op)
		tabletDone := (n.Kind == "replica" && n.Rep == d.Replicas-1) || (n.Kind == "tablet" && d.Replicas == 0)
		if tabletDone && len(ops) >= batchOps {
			flush()
		}
	})
	flush()
	return index, total, applyTime, applyCPU
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkDorisScale builds the 4,012,551-node catalog Doris cites for 2 GB
// of FE memory through Apply and reports its live heap, apply rate, and the
// image save and load times.
func BenchmarkDorisScale(b *testing.B) {
	shape := dorisFull
	// Every iteration builds, saves and loads the whole catalog; the
	// figures are means over the iterations.
	var heap, nodes, nops, imageBytes int64
	var applyTime, applyCPU, saveTime, saveCPU, loadTime, loadCPU time.Duration
	for b.Loop() {
		before := liveHeap()
		tr := New()
		_, n, at, ac := buildDorisCPU(b, shape, tr, 1, 100)
		heap += int64(liveHeap() - before)
		nops += int64(n)
		applyTime, applyCPU = applyTime+at, applyCPU+ac
		if tr.Len() != shape.Nodes() {
			b.Fatalf("tree has %d nodes, want %d", tr.Len(), shape.Nodes())
		}
		nodes += int64(tr.Len())

		var cw countWriter
		cpu := benchshape.ProcessCPU()
		start := time.Now()
		if err := tr.Save(&cw); err != nil {
			b.Fatal(err)
		}
		saveTime += time.Since(start)
		saveCPU += benchshape.ProcessCPU() - cpu
		imageBytes += cw.n

		var img bytes.Buffer
		img.Grow(int(cw.n))
		if err := tr.Save(&img); err != nil {
			b.Fatal(err)
		}
		tr2 := New()
		cpu = benchshape.ProcessCPU()
		start = time.Now()
		if err := tr2.Load(bytes.NewReader(img.Bytes())); err != nil {
			b.Fatal(err)
		}
		loadTime += time.Since(start)
		loadCPU += benchshape.ProcessCPU() - cpu
		if tr2.Len() != tr.Len() {
			b.Fatalf("loaded %d nodes, want %d", tr2.Len(), tr.Len())
		}
		if got := len(tr2.Find("replica", "worker", Int(7))); got != shape.ReplicaTotal()/shape.Workers {
			b.Fatalf("index lookup after load found %d replicas", got)
		}
		runtime.KeepAlive(tr)
	}
	iters := float64(b.N)
	b.ReportMetric(float64(heap)/1e6/iters, "heap-MB")
	b.ReportMetric(float64(heap)/float64(nodes), "bytes/node")
	b.ReportMetric(float64(nops)/applyTime.Seconds(), "apply-ops/s")
	if applyCPU > 0 {
		// The same rate per second of the process's CPU time: what the
		// applier achieves when it has the machine to itself (it is
		// shared with other work).
		b.ReportMetric(float64(nops)/applyCPU.Seconds(), "apply-ops/cpu-s")
	}
	b.ReportMetric(saveTime.Seconds()/iters, "save-s")
	b.ReportMetric(loadTime.Seconds()/iters, "load-s")
	b.ReportMetric(float64(imageBytes)/1e6/iters, "image-MB")
	if saveCPU > 0 {
		b.ReportMetric(saveCPU.Seconds()/iters, "save-cpu-s")
		b.ReportMetric(loadCPU.Seconds()/iters, "load-cpu-s")
	}
}

// dorisCreate returns the create of node n of the Doris shape, its
// attributes appended to kvs (returned, to be reused by the next).
func dorisCreate(n benchshape.Node, kvs []kv) (rawOp, []kv) {
	switch n.Kind {
	case "table":
		return rawOp{typ: OpCreate, path: n.Path, kind: n.Kind, set: []kv{{"engine", String("olap")}}}, kvs
	case "replica":
		r, k := n.Replica, len(kvs)
		kvs = append(kvs, // sorted by key, as the encoding requires
			kv{"size", Int(r.Size)},
			kv{"state", String(r.State)},
			kv{"version", Int(r.Version)},
			kv{"worker", Int(r.Worker)},
		)
		return rawOp{typ: OpCreate, path: n.Path, kind: n.Kind, set: kvs[k:len(kvs):len(kvs)]}, kvs
	}
	return rawOp{typ: OpCreate, path: n.Path, kind: n.Kind}, kvs
}

// BenchmarkDorisScaleDigest builds BenchmarkDorisScale's catalog through
// Apply into two trees, one keeping the digest and one without it, batch
// by batch in turn, and reports both apply rates (per second of wall time
// and of process CPU) and their ratios: what the digest costs the
// applier.
func BenchmarkDorisScaleDigest(b *testing.B) {
	_, empty := New().Digest()
	// None owns a node.
	wall, cpu := benchDorisPair(b, math.MaxInt, func(trees [2]*Tree) {
		trees[0].dg.off = true
	}, func(trees [2]*Tree) {
		for k, tr := range trees {
			if _, d := tr.Digest(); (k == 1) == (d == empty) {
				b.Fatalf("tree %d: digest kept %v, yet the digest is %v and an empty tree's %v", k, k == 1, d, empty)
			}
		}
	})
	b.ReportMetric(wall[1], "apply-ops/s-digest")
	b.ReportMetric(wall[0], "apply-ops/s-plain")
	b.ReportMetric(wall[1]/wall[0], "digest-ratio")
	if cpu[0] > 0 && cpu[1] > 0 {
		b.ReportMetric(cpu[1]/cpu[0], "digest-cpu-ratio")
	}
}

// benchDorisPair runs the loop of the benchmarks that build dorisFull into
// two trees at once (buildDorisPair), every ownEvery-th node owned in the
// second: each iteration makes two new trees, hands them to prepare
// before the build and to check after it (which fails the benchmark if
// they are not what it built). It returns each tree's apply rate over all
// the iterations, per second of wall time and of process CPU (0 where the
// CPU time is not known). Both trees take every batch in turn, so that a
// drift of the machine's speed hits both alike.
func benchDorisPair(b *testing.B, ownEvery int, prepare, check func([2]*Tree)) (wall, cpu [2]float64) {
	var ops [2]int
	var wallTime, cpuTime [2]time.Duration
	for b.Loop() {
		trees := [2]*Tree{New(), New()}
		prepare(trees)
		o, w, c := buildDorisPair(b, dorisFull, trees, 100, ownEvery)
		for k, tr := range trees {
			if want := dorisFull.Nodes() + 1 + dorisFull.Workers; tr.Len() != want {
				b.Fatalf("tree %d has %d nodes, want %d", k, tr.Len(), want)
			}
			ops[k], wallTime[k], cpuTime[k] = ops[k]+o[k], wallTime[k]+w[k], cpuTime[k]+c[k]
		}
		check(trees)
		runtime.KeepAlive(trees)
		trees = [2]*Tree{}
		runtime.GC()
	}
	for k := range 2 {
		wall[k] = float64(ops[k]) / wallTime[k].Seconds()
		if cpuTime[k] > 0 {
			cpu[k] = float64(ops[k]) / cpuTime[k].Seconds()
		}
	}
	return wall, cpu
}

// buildDorisPair builds the shape d into two trees through Apply, batch by
// batch in turn (which tree goes first alternates), so that both see the
// same machine: trees[0] with no node owned, trees[1] with every
// ownEvery-th node of the walk owned by the version of a worker's member
// node (a replica's by its worker's, any other node's by the one its
// position names). Both first get the member nodes (/workers/wNNN, at
// index 1, outside the figures) and take every batch in the version that
// carries owners (BatchV3). It returns, for each tree, the operations
// applied and the wall and process CPU time spent inside Apply.
func buildDorisPair(tb testing.TB, d benchshape.Doris, trees [2]*Tree, batchOps, ownEvery int) (ops [2]int, wall, cpu [2]time.Duration) {
	members := []Op{{Type: OpCreate, Path: "/workers", Kind: "dir"}}
	var workers []string
	for w := range d.Workers {
		workers = append(workers, fmt.Sprintf("/workers/w%03d", w))
		members = append(members, Op{Type: OpCreate, Path: workers[w], Kind: "member"})
	}
	for _, tr := range trees {
		mustApply(tb, tr, 1, Batch{Ops: members})
	}
	index := uint64(2)
	var batch []rawOp
	var kvs []kv
	var owned []int // positions in batch of the owned creates
	var bufs [2][]byte
	flush := func() {
		if len(batch) == 0 {
			return
		}
		bufs[1] = appendOps(bufs[1][:0], batch, BatchV3)
		for _, i := range owned {
			batch[i].owner = Owner{}
		}
		bufs[0] = appendOps(bufs[0][:0], batch, BatchV3)
		for j := range 2 {
			k := (int(index) + j) % 2
			c0 := benchshape.ProcessCPU()
			start := time.Now()
			res := trees[k].Apply(index, bufs[k]).(*Result)
			wall[k] += time.Since(start)
			cpu[k] += benchshape.ProcessCPU() - c0
			if res.Err != nil {
				tb.Fatalf("tree %d, batch at %d: %v", k, index, res.Err)
			}
			ops[k] += len(batch)
		}
		index++
		batch, kvs, owned = batch[:0], kvs[:0], owned[:0]
	}
	batch = append(batch, rawOp{typ: OpCreateIndex, kind: "replica", attr: "worker"})
	walked := 0
	d.Walk(func(n benchshape.Node) {
		var op rawOp
		op, kvs = dorisCreate(n, kvs)
		batch = append(batch, op)
		if walked++; walked%ownEvery == 0 {
			w := walked / ownEvery
			if n.Kind == "replica" {
				w = int(n.Replica.Worker)
			}
			batch[len(batch)-1].owner = Owner{Path: workers[w%len(workers)], Version: 1}
			owned = append(owned, len(batch)-1)
		}
		tabletDone := (n.Kind == "replica" && n.Rep == d.Replicas-1) || (n.Kind == "tablet" && d.Replicas == 0)
		if tabletDone && len(batch) >= batchOps {
			flush()
		}
	})
	flush()
	return ops, wall, cpu
}

// BenchmarkDorisScaleOwned builds BenchmarkDorisScale's catalog through
// Apply into two trees at once (buildDorisPair), one with no node owned
// and one with 1% of them owned, and reports both apply rates and their
// ratios, per second of wall time and of process CPU: what owning costs
// the applier (target: a ratio of at least 0.95). Interleaving the batches
// gives both trees the same machine, however loaded.
func BenchmarkDorisScaleOwned(b *testing.B) {
	const ownEvery = 100
	wall, cpu := benchDorisPair(b, ownEvery, func([2]*Tree) {}, func(trees [2]*Tree) {
		if got, want := trees[1].ownedCount(), (dorisFull.Nodes()-1)/ownEvery; got != want {
			b.Fatalf("%d nodes owned, want %d", got, want)
		}
	})
	b.ReportMetric(wall[0], "apply-ops/s-none")
	b.ReportMetric(wall[1], "apply-ops/s-owned")
	b.ReportMetric(wall[1]/wall[0], "owned-ratio")
	if cpu[0] > 0 && cpu[1] > 0 {
		b.ReportMetric(cpu[1]/cpu[0], "owned-cpu-ratio")
	}
}

// benchShape is the 1/50 Doris catalog of the other benchmarks.
var benchShape = benchshape.Small

func benchTree(b *testing.B) (*Tree, uint64) {
	tr := New()
	next, _, _ := buildDoris(b, benchShape, tr, 1, 100)
	return tr, next
}

// BenchmarkApply measures Apply alone on encoded batches of 100 replica
// updates.
func BenchmarkApply(b *testing.B) {
	tr, next := benchTree(b)
	var batches [][]byte
	for i := 0; i < 100; i++ {
		var ops []Op
		for j := 0; j < 100; j++ {
			tablet := 1 + (i*100+j)%20000
			p := fmt.Sprintf("/db%02d/tbl%02d/p%d/tablet%d/r%d", (tablet-1)/4000, ((tablet-1)/400)%10, ((tablet-1)/100)%4, tablet, j%3)
			ops = append(ops, Op{Type: OpUpdate, Path: p, Set: map[string]Value{"version": Int(int64(i))}})
		}
		data, err := Batch{Ops: ops}.Encode()
		if err != nil {
			b.Fatal(err)
		}
		batches = append(batches, data)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		res := tr.Apply(next, batches[n%len(batches)]).(*Result)
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		next++
		n++
	}
	b.ReportMetric(float64(n*100)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkReadsDuringApply runs parallel point reads and index lookups
// while one goroutine applies update batches as fast as it can.
func BenchmarkReadsDuringApply(b *testing.B) {
	tr, next := benchTree(b)
	var data [][]byte
	for i := 0; i < 50; i++ {
		var ops []Op
		for j := 0; j < 100; j++ {
			tablet := 1 + (i*100+j)%20000
			p := fmt.Sprintf("/db%02d/tbl%02d/p%d/tablet%d/r%d", (tablet-1)/4000, ((tablet-1)/400)%10, ((tablet-1)/100)%4, tablet, j%3)
			ops = append(ops, Op{Type: OpUpdate, Path: p, Set: map[string]Value{"worker": Int(int64((i + j) % 100))}})
		}
		d, err := Batch{Ops: ops}.Encode()
		if err != nil {
			b.Fatal(err)
		}
		data = append(data, d)
	}
	stop := make(chan struct{})
	var applied atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if res := tr.Apply(next, data[i%len(data)]).(*Result); res.Err != nil {
				panic(res.Err)
			}
			next++
			applied.Add(100)
		}
	})
	// The applier's rate counts the operations it applied while the timer
	// ran, not those before the readers started or after they stopped.
	b.ResetTimer()
	applied0 := applied.Load()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if i%10 == 9 {
				_ = tr.Find("replica", "worker", Int(int64(i%100)))
			} else if _, ok := tr.Get("/db01/tbl02/p3/tablet5150/r1"); !ok {
				panic("missing")
			}
			i++
		}
	})
	b.StopTimer()
	applied1 := applied.Load()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(applied1-applied0)/b.Elapsed().Seconds(), "apply-ops/s")
}

// BenchmarkSaveLoad saves and loads the 1/50 Doris catalog.
func BenchmarkSaveLoad(b *testing.B) {
	tr, _ := benchTree(b)
	var img bytes.Buffer
	if err := tr.Save(&img); err != nil {
		b.Fatal(err)
	}
	b.Run("save", func(b *testing.B) {
		for b.Loop() {
			if err := tr.Save(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(tr.Len())*float64(b.N)/b.Elapsed().Seconds(), "nodes/s")
	})
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if err := New().Load(bytes.NewReader(img.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(tr.Len())*float64(b.N)/b.Elapsed().Seconds(), "nodes/s")
	})
}

// BenchmarkDigestRecompute computes the digest of the 1/50 Doris catalog
// from scratch in each format, as a switch of the kept format (or a tree
// asked for the format it does not keep) does, and reports the time a
// node.
func BenchmarkDigestRecompute(b *testing.B) {
	tr, _ := benchTree(b)
	for _, f := range []DigestFormat{DigestV1, DigestV2} {
		b.Run(fmt.Sprintf("format=%d", f), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for range 10 {
					tr.s.computeDigest(f)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10*tr.Len()), "ns/node")
		})
	}
}

// BenchmarkDigestCreateElement computes the format 2 element of one Doris
// replica node the way a create adds it, from the attributes' encoding its
// entry carries (digester.created), and the way every other change does,
// from the node's blob (nodeHash2): the digest's cost a create in
// BenchmarkDorisScaleDigest.
func BenchmarkDigestCreateElement(b *testing.B) {
	// The smallest Doris shape: one node of each kind, the last a replica.
	var ops []rawOp
	benchshape.Doris{DBs: 1, Tables: 1, Parts: 1, Tablets: 1, Replicas: 1, Workers: 1}.Walk(func(n benchshape.Node) {
		op, _ := dorisCreate(n, nil)
		ops = append(ops, op)
	})
	data := appendOps(nil, ops, BatchV1)
	tr := New()
	if res := tr.Apply(1, data).(*Result); res.Err != nil {
		b.Fatal(res.Err)
	}
	var d decoder
	decoded, err := d.decode(data, nil, true)
	if err != nil {
		b.Fatal(err)
	}
	o := &decoded[len(decoded)-1]
	_, name := splitPath(o.path)
	s := tr.s
	slot, ok := s.Resolve(o.path)
	if !ok || o.kind != "replica" {
		b.Fatalf("the last node is %s %q", o.kind, o.path)
	}
	parent := s.At(slot).Parent
	b.Run("from=entry", func(b *testing.B) {
		var g digester
		b.ReportAllocs()
		for b.Loop() {
			g.created(s, slot, parent, o, name)
		}
	})
	b.Run("from=blob", func(b *testing.B) {
		var g digester
		b.ReportAllocs()
		for b.Loop() {
			g.nodeHash2(s, slot)
		}
	})
}

package catalog

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dorisShape is a Doris-like catalog: databases of tables of partitions of
// tablets of replicas; replicas carry worker, version, state and size, and
// are indexed by worker.
type dorisShape struct {
	dbs, tables, parts, tablets, replicas, workers int
}

var dorisFull = dorisShape{50, 50, 4, 100, 3, 100}

func (d dorisShape) nodes() int {
	t := d.dbs * d.tables
	p := t * d.parts
	tb := p * d.tablets
	return 1 + d.dbs + t + p + tb + tb*d.replicas
}

// build applies the shape to tr through Apply, in encoded batches of about
// batchOps operations starting at index first; it returns the next index,
// the number of operations and the wall and process CPU time spent inside
// Apply.
func (d dorisShape) build(tb testing.TB, tr *Tree, first uint64, batchOps int) (uint64, int, time.Duration) {
	idx, n, wall, _ := d.buildCPU(tb, tr, first, batchOps)
	return idx, n, wall
}

func (d dorisShape) buildCPU(tb testing.TB, tr *Tree, first uint64, batchOps int) (uint64, int, time.Duration, time.Duration) {
	r := rand.New(rand.NewPCG(1, 2))
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
		buf = appendOps(buf[:0], ops)
		cpu := processCPU()
		start := time.Now()
		res := tr.Apply(index, buf).(*Result)
		applyTime += time.Since(start)
		applyCPU += processCPU() - cpu
		if res.Err != nil {
			tb.Fatalf("batch at %d: %v", index, res.Err)
		}
		index++
		total += len(ops)
		ops, kvs = ops[:0], kvs[:0]
	}
	ops = append(ops, rawOp{typ: OpCreateIndex, kind: "replica", attr: "worker"})
	tablet := 0
	for db := 0; db < d.dbs; db++ {
		dbp := fmt.Sprintf("/db%02d", db)
		ops = append(ops, rawOp{typ: OpCreate, path: dbp, kind: "database"})
		for t := 0; t < d.tables; t++ {
			tp := fmt.Sprintf("%s/tbl%02d", dbp, t)
			ops = append(ops, rawOp{typ: OpCreate, path: tp, kind: "table", set: []kv{{"engine", String("olap")}}})
			for p := 0; p < d.parts; p++ {
				pp := tp + "/p" + strconv.Itoa(p)
				ops = append(ops, rawOp{typ: OpCreate, path: pp, kind: "partition"})
				for k := 0; k < d.tablets; k++ {
					tablet++
					tbp := pp + "/tablet" + strconv.Itoa(tablet)
					ops = append(ops, rawOp{typ: OpCreate, path: tbp, kind: "tablet"})
					for rep := 0; rep < d.replicas; rep++ {
						n := len(kvs)
						kvs = append(kvs, // sorted by key, as the encoding requires
							kv{"size", Int(int64(r.IntN(1 << 30)))},
							kv{"state", String("NORMAL")},
							kv{"version", Int(int64(1 + r.IntN(1000)))},
							kv{"worker", Int(int64((tablet*d.replicas + rep) % d.workers))},
						)
						ops = append(ops, rawOp{typ: OpCreate, path: tbp + "/r" + strconv.Itoa(rep), kind: "replica", set: kvs[n:len(kvs):len(kvs)]})
					}
					if len(ops) >= batchOps {
						flush()
					}
				}
			}
		}
	}
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
	for b.Loop() {
		before := liveHeap()
		tr := New()
		_, nops, applyTime, applyCPU := shape.buildCPU(b, tr, 1, 100)
		heap := liveHeap() - before
		nodes := tr.Len()
		if nodes != shape.nodes() {
			b.Fatalf("tree has %d nodes, want %d", nodes, shape.nodes())
		}

		var cw countWriter
		cpu := processCPU()
		start := time.Now()
		if err := tr.Save(&cw); err != nil {
			b.Fatal(err)
		}
		saveTime := time.Since(start)
		saveCPU := processCPU() - cpu

		var img bytes.Buffer
		img.Grow(int(cw.n))
		if err := tr.Save(&img); err != nil {
			b.Fatal(err)
		}
		tr2 := New()
		cpu = processCPU()
		start = time.Now()
		if err := tr2.Load(bytes.NewReader(img.Bytes())); err != nil {
			b.Fatal(err)
		}
		loadTime := time.Since(start)
		loadCPU := processCPU() - cpu
		if tr2.Len() != nodes {
			b.Fatalf("loaded %d nodes, want %d", tr2.Len(), nodes)
		}
		if got := len(tr2.Find("replica", "worker", Int(7))); got != shape.dbs*shape.tables*shape.parts*shape.tablets*shape.replicas/shape.workers {
			b.Fatalf("index lookup after load found %d replicas", got)
		}
		runtime.KeepAlive(tr)

		b.ReportMetric(float64(heap)/1e6, "heap-MB")
		b.ReportMetric(float64(heap)/float64(nodes), "bytes/node")
		b.ReportMetric(float64(nops)/applyTime.Seconds(), "apply-ops/s")
		if applyCPU > 0 {
			// The same rate per second of the process's CPU time: what the
			// applier achieves when it has the machine to itself (it is
			// shared with other work).
			b.ReportMetric(float64(nops)/applyCPU.Seconds(), "apply-ops/cpu-s")
		}
		b.ReportMetric(saveTime.Seconds(), "save-s")
		b.ReportMetric(loadTime.Seconds(), "load-s")
		b.ReportMetric(float64(cw.n)/1e6, "image-MB")
		if saveCPU > 0 {
			b.ReportMetric(saveCPU.Seconds(), "save-cpu-s")
			b.ReportMetric(loadCPU.Seconds(), "load-cpu-s")
		}
	}
}

// benchShape is a 1/50 Doris catalog (61,051 nodes) for the other benchmarks.
var benchShape = dorisShape{5, 10, 4, 100, 3, 100}

func benchTree(b *testing.B) (*Tree, uint64) {
	tr := New()
	next, _, _ := benchShape.build(b, tr, 1, 100)
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
	b.ResetTimer()
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
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(applied.Load())/b.Elapsed().Seconds(), "apply-ops/s")
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

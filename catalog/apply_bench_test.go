package catalog

import (
	"fmt"
	"testing"
)

// BenchmarkApplyUpdates applies batches of 100 updates of random replicas
// (by path) of the read benchmarks' catalogs, as a tablet report does, and
// reports the updates applied per second: the cost of finding a node to
// change, at each scale.
func BenchmarkApplyUpdates(b *testing.B) {
	const perBatch = 100
	for _, sc := range readScales {
		b.Run(sc.name, func(b *testing.B) {
			tr := readTree(b, sc.shape)
			paths := replicaPaths(sc.shape, readSample)
			batches := make([][]byte, readSample/perBatch)
			for i := range batches {
				ops := make([]Op, perBatch)
				for j := range ops {
					ops[j] = Op{Type: OpUpdate, Path: paths[i*perBatch+j], Set: map[string]Value{"version": Int(int64(i + 1))}}
				}
				batches[i] = encode(b, ops...)
			}
			b.ReportAllocs()
			next := tr.Index()
			n := 0
			for b.Loop() {
				next++
				if res := tr.Apply(next, batches[n%len(batches)]).(*Result); res.Err != nil {
					b.Fatal(fmt.Errorf("batch %d: %w", n, res.Err))
				}
				n++
			}
			b.ReportMetric(float64(n*perBatch)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}

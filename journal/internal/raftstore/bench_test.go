package raftstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkAppend measures one Ready's persistence on the real disk: n
// entries of 256 bytes plus the HardState in one synced batch.
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 5000x ./journal/internal/raftstore
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rng := rand.New(rand.NewPCG(0, 1))
			payload := make([]byte, 256)
			var index uint64
			batch := make([]*raftpb.Entry, n)
			syncs0 := s.Syncs()
			b.ReportAllocs()
			b.SetBytes(int64(256 * n))
			start := time.Now()
			for b.Loop() {
				for i := range batch {
					index++
					for j := range payload {
						payload[j] = byte(rng.Uint32())
					}
					batch[i] = ent(index, 1, string(payload))
				}
				if err := s.Append(hardState(1, 1, index), batch, nil, true); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N), "µs/append")
			b.ReportMetric(float64(s.Syncs()-syncs0)/float64(b.N), "syncs/op")
			b.ReportMetric(float64(index)/elapsed.Seconds(), "entries/s")
		})
	}
}

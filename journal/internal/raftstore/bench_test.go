package raftstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/benchshape"
)

// BenchmarkAppend measures one Ready's persistence on the real disk: n
// entries of 256 bytes plus the HardState in one synced batch. cpu-us/append
// is the process's CPU an append costs, its fdatasync included (the WAL's
// size runs ahead of its appends, so that fdatasync commits no inode size:
// prealloc.go).
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
			start, cpu0 := time.Now(), benchshape.ProcessCPU()
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
			elapsed, cpu := time.Since(start), benchshape.ProcessCPU()-cpu0
			b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N), "µs/append")
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/append")
			}
			b.ReportMetric(float64(s.Syncs()-syncs0)/float64(b.N), "syncs/op")
			b.ReportMetric(float64(index)/elapsed.Seconds(), "entries/s")
		})
	}
}

// BenchmarkEntries measures the replay read path: 200,000 entries of 256
// bytes written, the store reopened (cold entry cache), then read back in
// raft-sized pages of 4 MiB, as a restarting node does.
//
//	go test -run '^$' -bench BenchmarkEntries -benchtime 3x ./journal/internal/raftstore
func BenchmarkEntries(b *testing.B) {
	const n = 200_000
	dir := b.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	payload := string(make([]byte, 256))
	batch := make([]*raftpb.Entry, 0, 1000)
	for i := uint64(1); i <= n; i++ {
		batch = append(batch, ent(i, 1, payload))
		if len(batch) == cap(batch) {
			if err := s.Append(hardState(1, 1, i), batch, nil, false); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, CacheBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	read := 0
	start := time.Now()
	for b.Loop() {
		for lo := uint64(1); lo <= n; {
			ents, err := s.Entries(lo, n+1, 4<<20)
			if err != nil {
				b.Fatal(err)
			}
			lo += uint64(len(ents))
			read += len(ents)
		}
	}
	b.ReportMetric(float64(read)/time.Since(start).Seconds(), "entries/s")
}

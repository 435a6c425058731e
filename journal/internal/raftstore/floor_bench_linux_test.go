package raftstore

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/benchshape"
)

// BenchmarkAppendFloor sets a synced Append of 40 entries of 300 bytes (a
// replica's batch in BenchmarkPropose/proposers=64) beside the floor any
// log has on this disk: the same encoded bytes written to a plain file at
// its end, then fdatasync'd, into blocks already allocated (file=fallocated)
// or already written (file=written, as a recycled segment). The difference
// is what the Pebble store spends beyond the disk: the memtable insert,
// the WAL's framing, and the flushes and compactions of the log, which run
// within the benchmark as it writes about a memtable and a half.
//
//	go test -run '^$' -bench BenchmarkAppendFloor -benchtime 4000x ./journal/internal/raftstore
func BenchmarkAppendFloor(b *testing.B) {
	const perBatch = 40
	payload := string(make([]byte, 300))
	batch := func(first uint64) []*raftpb.Entry {
		out := make([]*raftpb.Entry, perBatch)
		for i := range out {
			out[i] = ent(first+uint64(i), 1, payload)
		}
		return out
	}
	report := func(b *testing.B, cpu0 time.Duration) {
		if cpu := benchshape.ProcessCPU() - cpu0; cpu > 0 {
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/batch")
		}
	}

	b.Run("store=pebble", func(b *testing.B) {
		s, err := Open(Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		batches := make([][]*raftpb.Entry, b.N)
		for i := range batches {
			batches[i] = batch(uint64(i*perBatch + 1))
		}
		cpu0 := benchshape.ProcessCPU()
		b.ResetTimer()
		for i, ents := range batches {
			if err := s.Append(hardState(1, 1, uint64(i*perBatch)), ents, nil, true); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		report(b, cpu0)
	})
	for _, written := range []bool{false, true} {
		name := "store=file/file=fallocated"
		if written {
			name = "store=file/file=written"
		}
		b.Run(name, func(b *testing.B) {
			ents := batch(1)
			var enc []byte
			for _, e := range ents {
				enc = appendEntryValue(enc, e)
			}
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			size := int64(b.N) * int64(len(enc))
			if written {
				_, err = f.Write(make([]byte, size))
			} else {
				err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
			}
			if err == nil {
				err = f.Sync()
			}
			if err != nil {
				b.Fatal(err)
			}
			cpu0 := benchshape.ProcessCPU()
			b.ResetTimer()
			for i := range b.N {
				if _, err := f.WriteAt(enc, int64(i)*int64(len(enc))); err != nil {
					b.Fatal(err)
				}
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			report(b, cpu0)
		})
	}
}

package journal_test

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metatree/metatree/journal"
)

// digestSM counts like countSM and keeps a digest of what it applied the
// way catalog.Tree keeps its own: a sum modulo 2^256 of one SHA-256 per
// applied element, updated on every Apply. It makes the journal run its
// consistency checks (journal.Digester).
type digestSM struct {
	countSM
	sum [4]uint64
}

func (s *digestSM) Apply(index uint64, data []byte) any {
	h := sha256.Sum256(data)
	var carry uint64
	for i := range s.sum {
		s.sum[i], carry = bits.Add64(s.sum[i], binary.LittleEndian.Uint64(h[8*i:]), carry)
	}
	return s.countSM.Apply(index, data)
}

// StateDigest runs on the applier's goroutine between two Apply calls, as
// journal.Digester requires, so the sum needs no lock.
func (s *digestSM) StateDigest() []byte {
	out := make([]byte, 0, 32)
	for _, l := range s.sum {
		out = binary.LittleEndian.AppendUint64(out, l)
	}
	return out
}

// BenchmarkProposeCheck is BenchmarkPropose's proposers=64 on two clusters
// at once: on "check", the state machine keeps a digest and the journal
// runs its consistency checks at the default interval; on "plain", the
// state machine keeps none and the checks are off. The rounds alternate
// between the two, so that both meet the same machine, and check-ratio is
// the write rate with the checks over the rate without.
func BenchmarkProposeCheck(b *testing.B) {
	const rounds, proposers = 10, 64
	check := newHTTPCluster(b, 3, func(cfg *journal.Config) { cfg.StateMachine = &digestSM{} })
	plain := newHTTPCluster(b, 3, func(cfg *journal.Config) { cfg.CheckInterval = -1 })
	checkLeader, plainLeader := waitLeader(b.Context(), b, check), waitLeader(b.Context(), b, plain)
	payloads := proposePayloads()
	var onTime, offTime float64
	var ops int
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		if n == 0 {
			continue
		}
		first := r * (b.N/rounds + 1)
		on, _, err := proposeN(b.Context(), check.Node(checkLeader).Journal(), payloads, first, n, proposers)
		if err != nil {
			b.Fatalf("with the checks: %v", err)
		}
		off, _, err := proposeN(b.Context(), plain.Node(plainLeader).Journal(), payloads, first, n, proposers)
		if err != nil {
			b.Fatalf("without the checks: %v", err)
		}
		onTime, offTime, ops = onTime+on.Seconds(), offTime+off.Seconds(), ops+n
	}
	b.StopTimer()
	checks := consistencyChecks(b, check.Node(checkLeader).Journal())
	if b.N >= 10000 && checks == 0 {
		b.Fatalf("the cluster with a digest made no consistency check in %d writes", ops)
	}
	if n := consistencyChecks(b, plain.Node(plainLeader).Journal()); n != 0 {
		b.Fatalf("the cluster with the checks off made %v consistency checks", n)
	}
	b.ReportMetric(float64(ops)/onTime, "ops/s-check")
	b.ReportMetric(float64(ops)/offTime, "ops/s-plain")
	b.ReportMetric(offTime/onTime, "check-ratio")
	b.ReportMetric(checks, "checks")
}

// consistencyChecks returns how many digest comparisons j has made
// (metatree_journal_consistency_checks_total).
func consistencyChecks(b *testing.B, j *journal.Journal) float64 {
	reg := prometheus.NewRegistry()
	if err := reg.Register(j.Collector()); err != nil {
		b.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "metatree_journal_consistency_checks_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

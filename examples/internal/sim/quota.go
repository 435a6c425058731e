package sim

import (
	"errors"
	"math/rand/v2"

	"github.com/metatree/metatree/catalog"
)

// drawQuota draws, from a source of its own (so that the seed's other
// draws stay as they are), the catalog quota every frontend of the run
// starts with alike: none in one run of two; else a bound on the nodes, on
// the bytes, or on both, near what the workload reaches in a run (a node
// costs a record of 48 bytes and its name and attributes), so that
// creates and puts of longer values meet 507 quota now and then. A
// refusal must come alike on every replica: the digests at one index and
// the linearizability check (a refused write applied nowhere) judge it.
func drawQuota(seed uint64) catalog.Quota {
	rng := rand.New(rand.NewPCG(seed, 0x9107a))
	if rng.IntN(2) != 0 {
		return catalog.Quota{}
	}
	nodes := 80 + rng.IntN(240)
	var q catalog.Quota
	switch rng.IntN(3) {
	case 0:
		q.MaxNodes = nodes
	case 1:
		q.MaxBytes = int64(nodes) * int64(70+rng.IntN(40))
	default:
		q.MaxNodes, q.MaxBytes = nodes, int64(nodes)*int64(70+rng.IntN(40))
	}
	return q
}

// quotaRefused reports whether err is a batch's refusal by the run's
// quota: it changed nothing.
func (r *run) quotaRefused(err error) bool {
	if r.cfg.Quota == (catalog.Quota{}) || !errors.Is(err, catalog.ErrQuota) {
		return false
	}
	r.quotaRefusals.Add(1)
	return true
}

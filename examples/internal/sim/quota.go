package sim

import (
	"errors"
	"math/rand/v2"

	"github.com/metatree/metatree/catalog"
)

// drawQuota draws, from a source of its own (so that the seed's other
// draws stay as they are), the catalog quota every frontend of the run
// starts with alike: none in two runs of three; else a node bound near
// what the workload creates in a run, and, one time in two, a bytes
// bound too, so that creates and growing puts meet 507 quota now and
// then. A refusal must come alike on every replica: the digests at one
// index and the linearizability check (a refused write applied nowhere)
// judge it.
func drawQuota(seed uint64) catalog.Quota {
	rng := rand.New(rand.NewPCG(seed, 0x9107a))
	if rng.IntN(3) != 0 {
		return catalog.Quota{}
	}
	q := catalog.Quota{MaxNodes: 80 + rng.IntN(240)}
	if rng.IntN(2) == 0 {
		q.MaxBytes = int64(q.MaxNodes) * int64(160+rng.IntN(80))
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

package sim

import (
	"slices"

	"github.com/anishathalye/porcupine"

	"github.com/metatree/metatree/internal/linearize"
)

// cut is a point of the history where an operator replaced the cluster's
// state with a surviving one (disaster.go): a survivor forced into a new
// cluster after a quorum loss, or a backup restored into a new cluster.
// What the old cluster acknowledged after the surviving state was taken
// may be lost by design; what the surviving state holds must be what the
// old cluster wrote, and the new cluster goes on from exactly it.
//
// The stamps are the history's logical clock: keep is taken before the
// operator made the survivor apply everything committed (a read barrier,
// and for a backup a checkpoint), so every write acknowledged before keep
// is in the surviving state; start is taken as the new cluster starts,
// end once state was read on it with a linearizable read.
type cut struct {
	keep, start, end int64
	// state is each register's value in the surviving state, as the new
	// cluster's first linearizable read gives it.
	state map[string]string
}

// cutClient numbers the history's client of a cut's own operations.
const cutClient = 300

// eras splits a history at its cuts (in order) into histories that are
// each linearizable on a correct cluster:
//
//   - before a cut: every operation called before its end, where a write
//     acknowledged before keep stays as it was and any other write may
//     take effect at any point after its call or never (its outcome turns
//     unknown), reads that completed before end stay, and a read of each
//     register's surviving value runs from keep to end: the surviving
//     state holds every write acknowledged before keep, and no value that
//     no write of the old cluster wrote;
//   - after it: a write of each register's surviving value before
//     everything else (the state the new cluster starts from), every
//     operation called from end on, and each write called before end that
//     had not returned by start, as one of unknown outcome called at
//     start (it may land on the new cluster, or may be in the surviving
//     state already). A read called before end that returned after it is
//     in neither: it may have read either cluster.
func eras(ops []porcupine.Operation, cuts []cut) [][]porcupine.Operation {
	var out [][]porcupine.Operation
	rest := ops
	for _, c := range cuts {
		var before, after []porcupine.Operation
		for _, op := range rest {
			in := op.Input.(linearize.KV)
			write := in.Put || in.CAS
			switch {
			case op.Call >= c.end:
				after = append(after, op)
			case write:
				b := op
				if op.Return >= c.keep {
					b = ofUnknownOutcome(op)
				}
				before = append(before, b)
				if op.Return > c.start {
					a := ofUnknownOutcome(op)
					a.Call = c.start
					after = append(after, a)
				}
			case op.Return < c.end:
				before = append(before, op)
			}
		}
		keys := make([]string, 0, len(c.state))
		for k := range c.state {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := c.state[k]
			before = append(before, porcupine.Operation{ClientId: cutClient, Input: linearize.KV{Key: k}, Output: v, Call: c.keep, Return: c.end})
			after = append(after, porcupine.Operation{ClientId: cutClient, Input: linearize.KV{Put: true, Key: k, Value: v}, Call: c.start - 2, Return: c.start - 1})
		}
		out = append(out, before)
		rest = after
	}
	return append(out, rest)
}

// ofUnknownOutcome returns op as a write of unknown outcome: it may take effect at
// any point after its call, or never.
func ofUnknownOutcome(op porcupine.Operation) porcupine.Operation {
	op.Return = unknownReturn
	if op.Input.(linearize.KV).CAS {
		op.Output = nil
	}
	return op
}

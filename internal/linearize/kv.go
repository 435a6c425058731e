package linearize

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// KV is a porcupine input: a put of Value, a compare-and-set (CAS) of
// Value over Expect, or a get, of one Key. A get's output is the string
// read; a CAS's is a bool (true: it set Value; false: it found another
// value and set nothing) or nil when its outcome is unknown.
type KV struct {
	Put        bool
	CAS        bool
	Key, Value string
	Expect     string
}

// KVModel is a register per key, partitioned by key; a get of a key never
// written reads "". A put (or CAS) whose outcome is unknown (an error: it may still
// commit) is recorded with an infinite return time, so it may take effect
// at any point after its call, or never within the history.
var KVModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(KV).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(KV)
		switch {
		case in.Put:
			return true, in.Value
		case in.CAS:
			matches := state.(string) == in.Expect
			if ok, known := output.(bool); known && !ok {
				return !matches, state
			} else if known {
				return matches, in.Value
			}
			if matches { // unknown outcome: it set Value if it took effect here
				return true, in.Value
			}
			return true, state
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(KV)
		if in.Put {
			return fmt.Sprintf("put(%s, %s)", in.Key, in.Value)
		}
		if in.CAS {
			return fmt.Sprintf("cas(%s, %q -> %s) -> %v", in.Key, in.Expect, in.Value, output)
		}
		return fmt.Sprintf("get(%s) -> %q", in.Key, output)
	},
}

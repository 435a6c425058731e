package linearize

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// KV is a porcupine input: a put of Value, or a get, of one Key.
type KV struct {
	Put        bool
	Key, Value string
}

// KVModel is a register per key, partitioned by key; a get of a key never
// written reads "". A put whose outcome is unknown (an error: it may still
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
		if in.Put {
			return true, in.Value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(KV)
		if in.Put {
			return fmt.Sprintf("put(%s, %s)", in.Key, in.Value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.Key, output)
	},
}

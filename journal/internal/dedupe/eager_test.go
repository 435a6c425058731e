package dedupe

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/envelope"
)

// eagerWindow is the window's rule in its plainest form, the reference
// Window is checked against: one map, and every copy forgotten as it
// leaves the window.
type eagerWindow struct {
	window uint64
	byKey  map[[16]byte]Rec
	order  []Key
}

func (d *eagerWindow) seen(index uint64, key [16]byte) (Rec, bool) {
	r, ok := d.byKey[key]
	if !ok || index-r.Index > d.window {
		return Rec{}, false
	}
	return r, true
}

func (d *eagerWindow) judge(index uint64, env envelope.Envelope) (Rec, Verdict) {
	return judge(index, env, d.window, d.seen)
}

func (d *eagerWindow) record(index uint64, key [16]byte, prev Rec, v Verdict, value any) {
	r := Rec{Index: index, Applied: index, Value: value}
	if v == Duplicate {
		r = prev
		r.Index = index
	}
	d.byKey[key] = r
	d.order = append(d.order, Key{Index: index, Key: key})
	d.evict(index)
}

func (d *eagerWindow) evict(index uint64) {
	for len(d.order) > 0 && index-d.order[0].Index > d.window {
		k := d.order[0]
		if r, ok := d.byKey[k.Key]; ok && r.Index == k.Index {
			delete(d.byKey, k.Key)
		}
		d.order = d.order[1:]
	}
}

func (d *eagerWindow) reset(keys []Key) {
	d.byKey = map[[16]byte]Rec{}
	d.order = nil
	for _, k := range keys {
		r, ok := d.byKey[k.Key]
		d.byKey[k.Key] = imaged(r, ok, k)
		d.order = append(d.order, k)
	}
}

// Window, whose generations forget copies lazily, decides every copy as
// the eager rule does and lists the same live keys, through duplicates,
// expiries, gaps in the indexes (entries that are not user entries),
// windows changed by the cluster, evictions from outside and resets from
// an image's keys.
func TestWindowDecidesAsTheEagerRule(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		window := uint64(1 + rng.IntN(40))
		lazy, eager := New(window), &eagerWindow{window: window, byKey: map[[16]byte]Rec{}}
		keySpace := 2 + rng.IntN(60)
		index := uint64(rng.IntN(100))
		for step := 0; step < 5000; step++ {
			switch n := rng.IntN(1000); {
			case n < 5: // the cluster changes its window
				window = uint64(rng.IntN(60))
				lazy.SetWindow(window)
				eager.window = window
			case n < 10: // an image's keys replace the state
				keys := append([]Key(nil), eager.order...)
				lazy.Reset(keys)
				eager.reset(keys)
			case n < 20: // a rebuild evicts up to its index
				lazy.Evict(index)
				eager.evict(index)
			case n < 60: // entries that are not user entries
				index += uint64(1 + rng.IntN(int(2*window+3)))
			default:
				index++
				env := envelope.Envelope{Kind: envelope.KindUser, Key: [16]byte{byte(rng.IntN(keySpace))}}
				if rng.IntN(3) == 0 {
					env.Bounded = true
					env.Since = index - min(index, uint64(rng.IntN(int(2*window+2))))
				}
				lr, lv := lazy.Judge(index, env)
				er, ev := eager.judge(index, env)
				require.Equal(t, ev, lv, "seed %d step %d index %d: verdict", seed, step, index)
				require.Equal(t, er, lr, "seed %d step %d index %d: record", seed, step, index)
				if lv != Expired {
					lazy.Record(index, env.Key, lr, lv, index)
					eager.record(index, env.Key, er, ev, index)
				}
			}
			require.Equal(t, len(eager.order), len(lazy.Live()), "seed %d step %d: live keys", seed, step)
			if len(eager.order) > 0 {
				require.Equal(t, eager.order, lazy.Live(), "seed %d step %d: live keys", seed, step)
			}
		}
	}
}

package sim

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/internal/linearize"
)

// A keyed put's retry that lands within the dedupe window returns the
// first copy and adds no operation; one that lands past it applies again,
// after another client's put, and the history of the two calls, recorded
// apart, stays linearizable with reads that saw the value, the other put,
// and the value again, where one put spanning both calls would not be.
func TestKeyedRetriesPastTheWindowAreRecordedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const margin = 32 // the dedupe window as wide
		cfg := frontend.Config{Token: "sim", RequestTimeout: 3 * time.Second, CompactMargin: margin}
		c := frontendtest.NewCluster(t, frontendtest.Options{Frontends: 1, InMemory: true, Config: cfg})
		r := &run{cfg: cfg, c: c, n: 1, voters: 1, timeout: cfg.RequestTimeout, hist: newHistory(time.Now(), nil)}
		ctx := t.Context()
		require.NoError(t, r.setup(ctx))
		f := c.Frontend(1)

		read := func(client int) {
			call := r.hist.call()
			n, ok := f.Tree().Get(keyPath(0))
			require.True(t, ok)
			r.hist.done(client, call, linearize.KV{Key: keyPath(0)}, n.Attrs["v"].Str(), true)
		}
		attempt := func(p *keyedPut) {
			ok, err := p.attempt(ctx, f)
			require.NoError(t, err)
			require.True(t, ok)
		}
		once := r.newKeyedPut(1, 0, "once", [16]byte{0xe1})
		attempt(once)
		attempt(once)
		require.Len(t, r.hist.operations(), 1, "a retry within the window adds no operation")
		read(3)
		other := r.newKeyedPut(4, 0, "other", [16]byte{0xe2})
		attempt(other)
		other.finish()
		read(3)
		for i := range margin + 1 {
			_, err := r.proposeKeyed(ctx, f, [16]byte{0xe3, byte(i)}, putBatch(1, "filler"))
			require.NoError(t, err)
		}
		attempt(once)
		once.finish()
		read(3)
		n, _ := f.Tree().Get(keyPath(0))
		require.Equal(t, "once", n.Attrs["v"].Str(), "the retry past the window applied again")
		ops := r.hist.operations()
		require.Len(t, ops, 6)
		require.True(t, porcupine.CheckOperations(linearize.KVModel, ops))

		// The two calls taken for one put from the first call to the
		// retry's return: the value seen, the other put, the value again
		// is a put applied twice.
		merged := append([]porcupine.Operation(nil), ops[:4]...)
		merged[0].Return = ops[4].Return
		merged = append(merged, ops[5])
		require.False(t, porcupine.CheckOperations(linearize.KVModel, merged))
	})
}

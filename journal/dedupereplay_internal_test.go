package journal

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
)

// A copy past its since's window that lands within the window of the
// key's applied copy is a duplicate, recorded, so that the window slides
// to it: a later copy of the key with a newer since (a client's retry
// through another member) is a duplicate too. A replay that starts after
// the applied copy (ReadEntries for a shadow checkpoint or a watch resumed
// from the log, the window stored with an image) decides that later copy
// as the applier did, and so delivers nothing at it: from the log's start,
// and from an image between the applied copy and the duplicate.
func TestAReplayDecidesACopyAfterAnExpiredDuplicateAsTheApplierDid(t *testing.T) {
	for _, withImage := range []bool{false, true} {
		name := "from the log's start"
		if withImage {
			name = "from an image"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const window = 16
				c := newCluster(t)
				imgs := map[uint64]*fakeImages{}
				n1 := c.listen(1)
				opt := imagesFor(imgs, window)(n1)
				require.NoError(t, c.open(n1, func(cfg *Config) {
					opt(cfg)
					cfg.Bootstrap = true
				}))
				c.waitLeader(1)
				propose(t, n1, "first")
				ctx := ctxT(t, 5*time.Second)
				key := [16]byte{0xd1}

				// Each turn of the raft loop appends its copies at
				// consecutive indexes after the last.
				turn := func(ents func(last uint64) [][]byte) {
					synctest.Wait()
					require.NoError(t, n1.j.do(ctx, func() {
						for _, e := range ents(n1.j.rn.Status().GetCommit()) {
							require.NoError(t, n1.j.rn.Propose(e))
						}
					}))
				}
				var p uint64 // the key's first copy: applied
				turn(func(last uint64) [][]byte {
					p = last + 1
					return [][]byte{envelope.EncodeUserSince(key, p-1, []byte("once"))}
				})
				require.NoError(t, n1.j.WaitApplied(ctx, p))
				dup, retry := p+window, p+window+1
				if withImage {
					img := checkpoint(t, n1, imgs[1])
					require.GreaterOrEqual(t, img, p)
				}
				turn(func(last uint64) [][]byte {
					var ents [][]byte
					for i := last + 1; i < dup; i++ {
						ents = append(ents, envelope.EncodeUserSince([16]byte{0xf0, byte(i)}, i-1, []byte("filler")))
					}
					// At p+window: a window after p, more than one after
					// its since; then a retry with a newer since.
					return append(ents,
						envelope.EncodeUserSince(key, p-1, []byte("once")),
						envelope.EncodeUserSince(key, dup, []byte("once")))
				})
				require.NoError(t, n1.j.WaitApplied(ctx, retry))
				n1.sm.mu.Lock()
				got := []string{n1.sm.ents[p], n1.sm.ents[dup], n1.sm.ents[retry]}
				n1.sm.mu.Unlock()
				require.Equal(t, []string{"once", "", ""}, got, "the applier applies the first copy alone")

				var replayed []uint64
				require.NoError(t, n1.j.ReadEntries(ctx, dup, retry, func(index uint64, _ []byte) error {
					replayed = append(replayed, index)
					return nil
				}))
				require.Empty(t, replayed, "a replay from the expired duplicate applies the retry after it")

				d, err := n1.j.dedupeAt(dup)
				require.NoError(t, err)
				_, verdict := d.Judge(retry, envelope.Envelope{Kind: envelope.KindUser, Key: key, Since: dup, Bounded: true})
				require.Equal(t, dedupe.Duplicate, verdict, "the window rebuilt at the expired duplicate holds it")
			})
		})
	}
}

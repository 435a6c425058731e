package journal

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A copy past its since's window that lands within the window of the
// key's applied copy is a duplicate, recorded, so that the window slides
// to it: a later copy of the key with a newer since (a client's retry
// through another member) is a duplicate too. A replay that starts after
// the applied copy (ReadEntries for a shadow checkpoint or a watch resumed
// from the log, the window stored with an image) decides that later copy
// as the applier did, and so delivers nothing at it.
func TestAReplayDecidesACopyAfterAnExpiredDuplicateAsTheApplierDid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 8
		c := newCluster(t)
		n1 := c.listen(1)
		require.NoError(t, c.open(n1, func(cfg *Config) {
			cfg.Bootstrap = true
			cfg.DedupeWindow, cfg.CompactMargin = window, window
		}))
		c.waitLeader(1)
		propose(t, n1, "first")
		synctest.Wait()

		key := [16]byte{0xd1}
		var last uint64
		ctx := ctxT(t, 5*time.Second)
		// One turn of the raft loop: the copies land at consecutive indexes
		// after last, with nothing between them.
		require.NoError(t, n1.j.do(ctx, func() {
			last = n1.j.rn.Status().GetCommit()
			p := last + 1 // the key's first copy: applied
			since := p - 1
			ents := [][]byte{encodeUserSince(key, since, []byte("once"))}
			for f := range window - 1 {
				ents = append(ents, encodeUserSince([16]byte{0xf0, byte(f)}, since, []byte("filler")))
			}
			// At p+window: a window after p, more than one after since.
			ents = append(ents, encodeUserSince(key, since, []byte("once")))
			// At p+window+1: a retry with a newer since.
			ents = append(ents, encodeUserSince(key, p+window, []byte("once")))
			for _, e := range ents {
				require.NoError(t, n1.j.rn.Propose(e))
			}
		}))
		p, dup, retry := last+1, last+1+window, last+2+window
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
		_, verdict := d.judge(retry, envelope{kind: kindUser, key: key, since: p + window, bounded: true})
		require.Equal(t, copyDuplicate, verdict, "the window rebuilt at the expired duplicate holds it")
	})
}

package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/journaltest"
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
				c, imgs := newImageBubble(t, journaltest.Options{Voters: 1}, window)
				n1 := c.Node(1)
				j1 := n1.Journal()
				propose(t, n1, "first")
				ctx := ctxFor(t, 5*time.Second)
				key := [16]byte{0xd1}

				// Each turn of the raft loop appends its copies at
				// consecutive indexes after the last.
				turn := func(ents func(last uint64) [][]byte) {
					synctest.Wait()
					require.NoError(t, j1.ProposeTurnForTest(ctx, ents))
				}
				var p uint64 // the key's first copy: applied
				turn(func(last uint64) [][]byte {
					p = last + 1
					return [][]byte{envelope.EncodeUserSince(key, p-1, []byte("once"))}
				})
				require.NoError(t, j1.WaitApplied(ctx, p))
				dup, retry := p+window, p+window+1
				if withImage {
					img := checkpoint(t, n1, imgs.of(1))
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
				require.NoError(t, j1.WaitApplied(ctx, retry))
				sm := smOf(n1)
				sm.mu.Lock()
				got := []string{sm.ents[p], sm.ents[dup], sm.ents[retry]}
				sm.mu.Unlock()
				require.Equal(t, []string{"once", "", ""}, got, "the applier applies the first copy alone")

				var replayed []uint64
				require.NoError(t, j1.ReadEntries(ctx, dup, retry, func(index uint64, _ []byte) error {
					replayed = append(replayed, index)
					return nil
				}))
				require.Empty(t, replayed, "a replay from the expired duplicate applies the retry after it")

				verdict, err := j1.DedupeVerdictAtForTest(dup, retry, key, dup)
				require.NoError(t, err)
				require.Equal(t, dedupe.Duplicate, verdict, "the window rebuilt at the expired duplicate holds it")
			})
		})
	}
}

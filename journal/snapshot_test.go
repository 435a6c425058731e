package journal_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

func TestSnapshotCatchUpAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, imgs := newImageBubble(t, journaltest.Options{Voters: 2}, 4)
		n1, n2 := c.Node(1), c.Node(2)
		j1 := n1.Journal()

		key := [16]byte{9}
		for i := range 30 {
			propose(t, c.Node(uint64(1+i%2)), fmt.Sprintf("v%d", i))
		}
		_, _, err := j1.ProposeWithKey(ctxFor(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		// No compaction while a snapshot transfer is in flight.
		j1.SnapshotsOutAddForTest(1)
		img := checkpoint(t, n1, imgs.of(1))
		first, err := j1.LogFirstIndexForTest()
		require.NoError(t, err)
		require.Equal(t, uint64(1), first, "log kept while a snapshot is in flight")
		j1.SnapshotsOutAddForTest(-1)
		img = checkpoint(t, n1, imgs.of(1)) // the same index, or later (leader timestamps)
		require.Equal(t, img, j1.Status().Image)
		// The log is compacted only up to an image: with none at least the
		// margin behind the newest, it is kept whole.
		first, err = j1.LogFirstIndexForTest()
		require.NoError(t, err)
		require.Equal(t, uint64(1), first, "log compacted with no image the margin behind the newest")
		for i := range 5 {
			propose(t, n1, fmt.Sprintf("w%d", i))
		}
		newest := checkpoint(t, n1, imgs.of(1))
		first, err = j1.LogFirstIndexForTest()
		require.NoError(t, err)
		require.Equal(t, img+1, first, "log compacted up to the image the margin behind the newest %d", newest)
		got, err := j1.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, first, got)
		_, err = j1.TermAt(first - 2)
		require.ErrorIs(t, err, journal.ErrCompacted)

		// A new observer needs entries the leader no longer has: it is sent the
		// image, fetches it, installs it, and replays the rest.
		n3, err := c.add(t, journal.Observer, nil)
		require.NoError(t, err)
		// The image predates node 3, so raft on node 3 could not use it: the
		// journal asks the hook for a new image instead of sending it.
		select {
		case <-imgs.of(1).requests:
		case <-time.After(10 * time.Second):
			t.Fatal("no image requested")
		}
		checkpoint(t, n1, imgs.of(1))
		propose(t, n1, "after-image")
		require.NoError(t, n3.Journal().ReadBarrier(ctxFor(t, 10*time.Second)))
		require.Equal(t, 1, imgs.of(3).fetchCount())
		require.Equal(t, 1, imgs.of(3).installCount())
		// raft heard how the transfer ended (ReportSnapshot), so compaction is
		// allowed again.
		awaitTicks(t, 500, "no snapshot in flight", func() bool { return j1.SnapshotsOutForTest() == 0 })
		require.Equal(t, smOf(n1).values(), smOf(n3).values())
		// The dedupe window came with the image: a retry of the keyed write
		// right after it is skipped on the new node too.
		_, _, err = n3.Journal().ProposeWithKey(ctxFor(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		propose(t, n1, "barrier")
		require.NoError(t, n3.Journal().ReadBarrier(ctxFor(t, 5*time.Second)))
		require.NoError(t, n2.Journal().ReadBarrier(ctxFor(t, 5*time.Second)))
		require.Equal(t, smOf(n1).values(), smOf(n3).values())
		require.Equal(t, smOf(n1).values(), smOf(n2).values())
		// A shadow checkpoint on the new node, from the image it installed,
		// decides the retry as its live applier did: its log starts after the
		// image, so the image's window seeds the replay.
		var replayed []string
		st3 := n3.Journal().Status()
		require.NoError(t, n3.Journal().ReadEntries(ctxFor(t, 5*time.Second), st3.Image, st3.Applied, func(_ uint64, data []byte) error {
			replayed = append(replayed, string(data))
			return nil
		}))
		require.NotEmpty(t, replayed)
		// The retry lands within the window of the first copy unless leader
		// timestamps pushed it out; either way the replay decides as the
		// live applier did.
		keyed := 0
		for _, v := range smOf(n3).values() {
			if v == "keyed" {
				keyed++
			}
		}
		appliedAgain := keyed > 1
		require.Equal(t, appliedAgain, slices.Contains(replayed, "keyed"),
			"the replay after the image %v decides the retry unlike the live applier (applied again: %v)", replayed, appliedAgain)

		// Restarts load the newest image and replay the log after it.
		for _, n := range []*journaltest.Node{n1, n3} {
			c.stop(t, n.ID)
			require.NoError(t, c.restart(t, n.ID, nil))
			require.NoError(t, n.Journal().ReadBarrier(ctxFor(t, 10*time.Second)))
			require.NoError(t, n2.Journal().ReadBarrier(ctxFor(t, 10*time.Second)))
			require.Equal(t, smOf(n2).values(), smOf(n).values(), "node %d after restart", n.ID)
		}
		propose(t, n3, "end")
	})
}

// A keyed write retried three times, the third copy just outside the window
// of the applied copy but inside that of the skipped second one: the live
// applier, a shadow checkpoint replay (ReadEntries) and a restart from an
// image taken between the copies decide it the same way (the window slides
// to the latest copy, so it is skipped everywhere).
func TestDedupeAgreesAcrossRestartAndShadowReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 4
		c, n1, imgs := soleVoterWithImages(t, window)
		j1 := n1.Journal()
		ctx := ctxFor(t, 10*time.Second)
		key := [16]byte{42}
		i1, _, err := j1.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		got, _, err := j1.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, i1, got, "a retry answers with the applied copy's index")
		i2 := j1.Status().Applied
		require.Equal(t, i1+1, i2)
		img := checkpoint(t, n1, imgs)
		require.Equal(t, i2, img)
		for i := 0; ; i++ {
			if idx := propose(t, n1, fmt.Sprintf("f%d", i)); idx >= i1+window {
				require.Equal(t, i1+window, idx)
				break
			}
		}
		got, _, err = j1.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, i1, got, "the third copy is within the window of the second")
		live := smOf(n1).values()
		copies := 0
		for _, v := range live {
			if v == "k" {
				copies++
			}
		}
		require.Equal(t, 1, copies, "live: %v", live)

		// The shadow replay from the image applies what the live applier did
		// after it: the fillers only.
		var shadow []string
		require.NoError(t, j1.ReadEntries(ctx, img, j1.Status().Applied, func(_ uint64, data []byte) error {
			shadow = append(shadow, string(data))
			return nil
		}))
		require.Equal(t, live[len(live)-len(shadow):], shadow)
		require.NotContains(t, shadow, "k")

		// A restart from the image replays to the same state.
		c.stop(t, 1)
		require.NoError(t, c.restart(t, 1, nil))
		require.NoError(t, n1.Journal().ReadBarrier(ctxFor(t, 10*time.Second)))
		require.Equal(t, live, smOf(n1).values())
	})
}

// When the applier fails (here: the image install a catching-up observer
// needs), the node's proposers and WaitApplied get that failure at once
// rather than waiting for an apply that never comes.
func TestApplierFailureFailsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, imgs := newImageBubble(t, journaltest.Options{Voters: 1}, 4)
		n1 := c.Node(1)
		imgs1 := imgs.of(1)
		for i := range 20 {
			propose(t, n1, fmt.Sprintf("v%d", i))
		}
		checkpoint(t, n1, imgs1)
		for i := range 5 {
			propose(t, n1, fmt.Sprintf("w%d", i))
		}
		checkpoint(t, n1, imgs1) // compacts up to the first: a new node needs an image

		imgs.of(2).installErr = errors.New("disk full")
		n2, err := c.add(t, journal.Observer, nil)
		require.NoError(t, err)
		j2 := n2.Journal()
		// A write through the observer waits for its local apply, which needs
		// the image first.
		waiting := make(chan error, 1)
		go func() {
			_, _, err := j2.Propose(ctxFor(t, 30*time.Second), []byte("during"))
			waiting <- err
		}()
		// Answer every image request until the leader has one it can send; the
		// observer's applier then fails to install it, which fails the waiting
		// proposer (after the failure is recorded for Status).
		deadline := time.NewTimer(10 * time.Second)
		defer deadline.Stop()
		for failed := false; !failed; {
			select {
			case <-imgs1.requests:
				checkpoint(t, n1, imgs1)
			case err := <-waiting:
				require.ErrorIs(t, err, journal.ErrClosed)
				require.ErrorContains(t, err, "disk full")
				failed = true
			case <-deadline.C:
				t.Fatal("the waiting proposer was not told of the applier's failure")
			}
		}
		require.ErrorContains(t, j2.Status().Err, "disk full")

		_, _, err = j2.Propose(ctxFor(t, 10*time.Second), []byte("after"))
		require.ErrorIs(t, err, journal.ErrClosed)
		require.ErrorContains(t, err, "disk full")
		err = j2.WaitApplied(ctxFor(t, 10*time.Second), n1.Journal().Status().Applied+1000)
		require.ErrorContains(t, err, "disk full")
		// The leader is unaffected.
		propose(t, n1, "still")
	})
}

// TestReplayFromTheImageTheLogStartsAfterDecidesAsTheApplier writes a keyed
// entry, an image right after it, a retry of the entry (a duplicate the
// live applier skips) and a second image that compacts the log up to the
// first. A replay from the first image (ReadEntries(FirstIndex()-1, …), as
// the checkpointer falling back to an older image and a resumed watch do)
// takes the compacted part of the dedupe window from that image and skips
// the retry too.
func TestReplayFromTheImageTheLogStartsAfterDecidesAsTheApplier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 4
		c, n1, imgs := soleVoterWithImages(t, window)
		j1 := n1.Journal()
		ctx := ctxFor(t, 10*time.Second)
		key := [16]byte{7, 7}
		i1, _, err := j1.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		first := checkpoint(t, n1, imgs)
		require.Equal(t, i1, first, "the first image is right after the keyed entry")
		got, _, err := j1.ProposeWithKey(ctx, key, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, i1, got, "the retry is a duplicate for the live applier")
		require.Equal(t, i1+1, j1.Status().Applied, "the retry reached the log right after the image")
		for i := 0; j1.Status().Applied < first+window; i++ {
			propose(t, n1, fmt.Sprintf("f%d", i))
		}
		checkpoint(t, n1, imgs)
		start, err := j1.FirstIndex()
		require.NoError(t, err)
		require.Equal(t, first+1, start, "the second image compacts the log up to the first")

		live := smOf(n1).values()
		require.Equal(t, "k", live[0], "live: %v", live)
		require.NotContains(t, live[1:], "k", "live: the keyed entry applied once")
		var replayed []string
		require.NoError(t, j1.ReadEntries(ctx, first, j1.Status().Applied, func(_ uint64, data []byte) error {
			replayed = append(replayed, string(data))
			return nil
		}))
		require.Equal(t, live[1:], replayed, "the replay from the image at %d applies what the live applier applied after it", first)

		// A restart (the newest image, then the log) keeps deciding alike.
		c.stop(t, 1)
		require.NoError(t, c.restart(t, 1, nil))
		j1 = n1.Journal()
		require.NoError(t, j1.ReadBarrier(ctxFor(t, 10*time.Second)))
		replayed = replayed[:0]
		require.NoError(t, j1.ReadEntries(ctx, first, j1.Status().Applied, func(_ uint64, data []byte) error {
			replayed = append(replayed, string(data))
			return nil
		}))
		require.Equal(t, live[1:], replayed, "after a restart")

		// Without the window recorded at the log's start, a replay from there
		// fails instead of deciding the retry otherwise.
		require.NoError(t, j1.RecordMembershipWithoutKeysForTest(first))
		err = j1.ReadEntries(ctx, first, j1.Status().Applied, func(uint64, []byte) error { return nil })
		require.ErrorIs(t, err, journal.ErrCompacted)
	})
}

// soleVoterWithImages bootstraps node 1 alone, leading, with fake images,
// a compaction margin and dedupe window of window entries, and no leader
// timestamps between copies; its restarts are alike.
func soleVoterWithImages(t *testing.T, window uint64) (*httpBubble, *journaltest.Node, *fakeImages) {
	t.Helper()
	c, imgs := newImageBubble(t, journaltest.Options{
		Voters:    1,
		Configure: func(cfg *journal.Config) { cfg.StaleAfter = time.Hour },
	}, window)
	return c, c.Node(1), imgs.of(1)
}

package consistency

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/errs"
)

// voters5 are the voters of these tests: 3 make a majority (6 is an
// observer, 7 no member).
var voters5 = []uint64{1, 2, 3, 4, 5}

// tallyChecker is a Checker with a recorded mark at index 10 with digest
// own.
func tallyChecker(own []byte) *Checker {
	ck := &Checker{}
	ck.RecordMark(10, 1, own)
	return ck
}

func checkReportOf(mark, from uint64, d string) envelope.Check {
	return envelope.Check{Op: envelope.CheckReport, Mark: mark, From: from, Digest: []byte(d)}
}

// tallyCE is the corruption alarm a report raises on this member.
func tallyCE(ck *Checker, c envelope.Check) *CorruptError {
	ce, _ := ck.Tally(voters5, c)
	return ce
}

// A member compares only once a majority of the voters reported one
// digest: duplicates, observers and marks older than every one kept do
// not count, and a split without a majority raises nothing yet.
func TestTallyComparesOnlyWithAMajorityOfVoters(t *testing.T) {
	ck := tallyChecker([]byte("good"))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 1, "bad")))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 1, "bad")), "a duplicate report")
	require.Nil(t, tallyCE(ck, checkReportOf(10, 6, "bad")), "an observer's report")
	require.Nil(t, tallyCE(ck, checkReportOf(10, 7, "bad")), "a non-member's report")
	require.Nil(t, tallyCE(ck, checkReportOf(10, 2, "good")))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 3, "good")))
	require.Zero(t, ck.Count(), "no digest has a majority yet")
	require.Nil(t, ck.Current())
	require.Nil(t, tallyCE(ck, checkReportOf(10, 4, "good")), "a majority agrees with this member")
	require.Equal(t, uint64(1), ck.Count())
	require.Equal(t, &Alarm{Index: 10, Format: 1, Members: []uint64{1}, Majority: []byte("good")}, ck.Current(),
		"every member names the voter that differs")
	require.Nil(t, tallyCE(ck, checkReportOf(10, 5, "bad")), "the round is decided")
	require.Equal(t, []uint64{1, 5}, ck.Current().Members, "a late report that differs joins the alarm")
	require.NoError(t, ck.WriteRefusal(), "a majority agrees: writes go on")

	ck = tallyChecker([]byte("mine"))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 1, "x")))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 2, "x")))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 3, "y")))
	require.Nil(t, tallyCE(ck, checkReportOf(10, 4, "y")))
	require.Zero(t, ck.Count(), "a split that a last report can still decide raises nothing")
	ce := tallyCE(ck, checkReportOf(10, 5, "y"))
	require.ErrorIs(t, ce, errs.ErrCorrupt)
	require.Equal(t, &CorruptError{Index: 10, Format: 1, Local: []byte("mine"), Majority: []byte("y"), Agreeing: []uint64{3, 4, 5}}, ce)
	require.ErrorContains(t, ce, "at index 10")
	require.ErrorContains(t, ce, "(format 1)")
}

// Once no digest can reach a majority of the voters, every member (with
// or without a digest of its own at the mark) raises the alarm that stops
// writes, names no member in particular but every voter that reported,
// and Clear ends it.
func TestTallyWithoutAMajorityStopsWritesUntilCleared(t *testing.T) {
	for _, own := range [][]byte{[]byte("x"), nil} {
		ck := tallyChecker(own)
		for id, d := range map[uint64]string{1: "x", 2: "x", 3: "y"} {
			require.Nil(t, tallyCE(ck, checkReportOf(10, id, d)))
		}
		require.NoError(t, ck.WriteRefusal(), "two voters may still agree")
		require.Nil(t, tallyCE(ck, checkReportOf(10, 4, "z")))
		require.Nil(t, ck.Current(), "voter 5 may yet make x a majority")
		require.Nil(t, tallyCE(ck, checkReportOf(10, 5, "y")))
		require.Equal(t, &Alarm{Index: 10, Format: 1, Members: []uint64{1, 2, 3, 4, 5}, NoMajority: true}, ck.Current())
		err := ck.WriteRefusal()
		require.ErrorIs(t, err, errs.ErrCorrupt)
		require.ErrorContains(t, err, "index 10")
		require.Zero(t, ck.Count(), "nothing to compare with")

		require.Equal(t, &Alarm{Index: 10, Format: 1, Members: []uint64{1, 2, 3, 4, 5}, NoMajority: true}, ck.Clear())
		require.Nil(t, ck.Current())
		require.NoError(t, ck.WriteRefusal())
	}
}

// A report on a mark this member never applied (it loaded a later image)
// is kept, so that the round is decided as on the others; a report on a
// mark older than every one kept is dropped.
func TestTallyKeepsRoundsOfMarksThisMemberHasNoDigestOf(t *testing.T) {
	ck := &Checker{}
	for i := uint64(1); i <= Keep; i++ {
		ck.RecordMark(100+i, 1, []byte("d"))
	}
	require.Nil(t, tallyCE(ck, checkReportOf(50, 1, "a")), "older than every mark kept")
	require.Len(t, ck.marks, Keep)
	require.Equal(t, uint64(101), ck.marks[0].index)
	for _, id := range []uint64{1, 2, 3} {
		require.Nil(t, tallyCE(ck, checkReportOf(200, id, "a")))
	}
	require.Len(t, ck.marks, Keep)
	require.Equal(t, uint64(200), ck.marks[Keep-1].index)
	require.Zero(t, ck.Count(), "no digest of its own to compare")
	require.Nil(t, ck.Current())
}

// The check at start passes at the first comparison, agreeing with the
// majority, at a mark after the loaded image, and not at one before it.
func TestTallyEndsTheCheckAtStartAtAMarkAfterTheImage(t *testing.T) {
	ck := &Checker{}
	ck.StartPending(20)
	ck.RecordMark(15, 1, []byte("d"))
	ck.RecordMark(25, 1, []byte("d"))
	for _, id := range []uint64{1, 2, 3} {
		require.Nil(t, tallyCE(ck, checkReportOf(15, id, "d")))
	}
	require.True(t, ck.Pending(), "a mark before the image confirms nothing of it")
	for _, id := range []uint64{1, 2, 3} {
		require.Nil(t, tallyCE(ck, checkReportOf(25, id, "d")))
	}
	require.False(t, ck.Pending())
}

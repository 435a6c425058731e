package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// tallyJournal is a journal with just what tally reads: voters 1 to 5 (3
// make a majority) and a recorded mark at index 10 with digest own.
func tallyJournal(own []byte) *Journal {
	j := &Journal{}
	j.mu.membership = &membership{Voters: []uint64{1, 2, 3, 4, 5}, Learner: []uint64{6}}
	j.checker.marks = []checkMarkRec{{index: 10, digest: own, votes: map[uint64][]byte{}}}
	return j
}

func checkReportOf(mark, from uint64, d string) checkEntry {
	return checkEntry{op: checkReport, mark: mark, from: from, digest: []byte(d)}
}

// A member compares only once a majority of the voters reported one
// digest: duplicates, observers and marks it has no digest of do not
// count, and a split without a majority raises nothing.
func TestTallyComparesOnlyWithAMajorityOfVoters(t *testing.T) {
	j := tallyJournal([]byte("good"))
	require.Nil(t, j.tally(checkReportOf(10, 1, "bad")))
	require.Nil(t, j.tally(checkReportOf(10, 1, "bad")), "a duplicate report")
	require.Nil(t, j.tally(checkReportOf(10, 6, "bad")), "an observer's report")
	require.Nil(t, j.tally(checkReportOf(10, 7, "bad")), "a non-member's report")
	require.Nil(t, j.tally(checkReportOf(9, 2, "bad")), "a mark this member has no digest of")
	require.Nil(t, j.tally(checkReportOf(10, 2, "good")))
	require.Nil(t, j.tally(checkReportOf(10, 3, "good")))
	require.Zero(t, j.checker.count(), "no digest has a majority yet")
	require.Nil(t, j.tally(checkReportOf(10, 4, "good")), "a majority agrees with this member")
	require.Equal(t, uint64(1), j.checker.count())
	require.Nil(t, j.tally(checkReportOf(10, 5, "bad")), "the round is decided")

	j = tallyJournal([]byte("mine"))
	require.Nil(t, j.tally(checkReportOf(10, 1, "x")))
	require.Nil(t, j.tally(checkReportOf(10, 2, "x")))
	require.Nil(t, j.tally(checkReportOf(10, 3, "y")))
	require.Nil(t, j.tally(checkReportOf(10, 4, "y")))
	require.Zero(t, j.checker.count(), "a split with no majority raises nothing")
	ce := j.tally(checkReportOf(10, 5, "y"))
	require.ErrorIs(t, ce, ErrCorrupt)
	require.Equal(t, &CorruptError{Index: 10, Local: []byte("mine"), Majority: []byte("y"), Agreeing: []uint64{3, 4, 5}}, ce)
	require.ErrorContains(t, ce, "at index 10")
}

func TestDecodeCheckRejectsBadEntries(t *testing.T) {
	for _, b := range [][]byte{
		{kindCheck},
		{kindCheck, checkMark, 0},
		{kindCheck, checkReport, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1},                  // no digest
		append([]byte{kindCheck, checkReport, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 1), // mark 0
		encodeCheckReport(1, 2, make([]byte, maxDigestLen+1)),
	} {
		_, err := decodeCheck(b)
		require.ErrorIs(t, err, ErrMalformed, "%x", b)
	}
	_, err := decodeCheck([]byte{kindCheck, 9})
	require.ErrorIs(t, err, ErrUnknownVersion)
}

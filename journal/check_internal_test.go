package journal

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// A clear entry ends, on the member that applies it, the alarm that
// stops writes once no digest can reach a majority of the voters.
func TestApplyCheckClearEndsTheAlarm(t *testing.T) {
	j := &Journal{log: slog.New(slog.DiscardHandler)}
	j.cfg.StateMachine = digestSM{}
	j.mu.membership = &membership.Membership{Voters: []uint64{1, 2, 3, 4, 5}}
	j.checker.RecordMark(10, 1, []byte("x"))
	for id, d := range map[uint64]string{1: "x", 2: "x", 3: "y", 4: "z", 5: "y"} {
		require.Nil(t, j.applyCheck(12, envelope.Check{Op: envelope.CheckReport, Mark: 10, From: id, Digest: []byte(d)}))
	}
	require.ErrorIs(t, j.checker.WriteRefusal(), ErrCorrupt, "no digest has a majority")
	require.Nil(t, j.applyCheck(13, envelope.Check{Op: envelope.CheckClear}))
	require.Nil(t, j.checker.Current())
	require.NoError(t, j.checker.WriteRefusal())
}

// digestSM is a state machine with a fixed digest.
type digestSM struct{}

func (digestSM) Apply(uint64, []byte) any { return nil }
func (digestSM) StateDigest() []byte      { return []byte("d") }

func TestDecodeCheckRejectsBadEntries(t *testing.T) {
	for _, b := range [][]byte{
		{envelope.KindCheck},
		{envelope.KindCheck, envelope.CheckMark, 0},
		{envelope.KindCheck, envelope.CheckReport, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1},                  // no digest
		append([]byte{envelope.KindCheck, envelope.CheckReport, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 1), // mark 0
		envelope.EncodeCheckReport(1, 2, make([]byte, envelope.MaxDigestLen+1)),
		{envelope.KindCheck, envelope.CheckMarkOf},       // no format
		{envelope.KindCheck, envelope.CheckMarkOf, 1},    // format 1 has the plain mark
		{envelope.KindCheck, envelope.CheckMarkOf, 2, 0}, // a trailing byte
	} {
		_, err := envelope.DecodeCheck(b)
		require.ErrorIs(t, err, ErrMalformed, "%x", b)
	}
	c, err := envelope.DecodeCheck(envelope.EncodeCheckClear())
	require.NoError(t, err)
	require.Equal(t, envelope.CheckClear, c.Op)
	_, err = envelope.DecodeCheck([]byte{envelope.KindCheck, envelope.CheckClear, 0})
	require.ErrorIs(t, err, ErrMalformed)
	c, err = envelope.DecodeCheck(envelope.EncodeCheckMark(2))
	require.NoError(t, err)
	require.Equal(t, envelope.Check{Op: envelope.CheckMark, Format: 2}, c)
	_, err = envelope.DecodeCheck([]byte{envelope.KindCheck, 9})
	require.ErrorIs(t, err, ErrUnknownVersion)
}

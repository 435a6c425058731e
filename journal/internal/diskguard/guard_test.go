package diskguard

import (
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/errs"
)

// Under the reserve the guard refuses, and under half of it releases the
// ballast; with room again it takes writes and writes the ballast back.
func TestGuardRefusesUnderTheReserveAndKeepsTheBallast(t *testing.T) {
	const reserve, ballast = 100 << 20, 1 << 20
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/d", 0o755))
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	g := New(fs, "/d", reserve, ballast, slog.New(slog.DiscardHandler))
	hasBallast := func() bool { _, err := fs.Stat("/d/" + BallastName); return err == nil }

	require.NoError(t, g.Check())
	require.NoError(t, g.Refuse())
	require.False(t, g.Low())
	require.True(t, hasBallast(), "the ballast is written while there is room")
	free, ok := g.Free()
	require.True(t, ok)
	require.Equal(t, uint64(1<<30), free)

	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: reserve / 4, TotalBytes: 2 << 30})
	require.NoError(t, g.Check())
	require.True(t, g.Low())
	require.ErrorIs(t, g.Refuse(), errs.ErrNoSpace)
	require.False(t, hasBallast(), "the ballast is released under half the reserve")

	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	require.NoError(t, g.Check())
	require.NoError(t, g.Refuse())
	require.True(t, hasBallast(), "the ballast is written again")
}

// Without a reserve, or on a filesystem that reports no usage, the guard
// is off: it refuses nothing and reports no free space.
func TestGuardOff(t *testing.T) {
	fs := vfs.NewMem()
	g := New(fs, "/d", 0, 0, slog.New(slog.DiscardHandler))
	require.NoError(t, g.Check())
	require.NoError(t, g.Refuse())
	_, ok := g.Free()
	require.False(t, ok)

	g = New(fs, "/d", 1<<20, 0, slog.New(slog.DiscardHandler)) // usage unsupported
	require.NoError(t, g.Check())
	_, ok = g.Free()
	require.False(t, ok)
}

// A raised voter's alarm refuses, naming the member; none refuses nothing.
func TestAlarm(t *testing.T) {
	raised := map[uint64]bool{3: true}
	require.NoError(t, Alarm([]uint64{1, 2}, func(id uint64) bool { return raised[id] }))
	err := Alarm([]uint64{1, 2, 3}, func(id uint64) bool { return raised[id] })
	require.ErrorIs(t, err, errs.ErrNoSpace)
	require.ErrorContains(t, err, "member 3")
}

package operr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	errNoLeader = errors.New("journal: no leader")
	errUnknown  = errors.New("journal: unknown member")
)

type haltError struct{ index int }

func (e *haltError) Error() string { return fmt.Sprintf("journal: halted at %d", e.index) }

func TestErrorfNamesThePackageOnce(t *testing.T) {
	err := Errorf("journal: propose: %w", fmt.Errorf("%w: node 2 unreachable", errNoLeader))
	require.Equal(t, "journal: propose: no leader: node 2 unreachable", err.Error())
	require.ErrorIs(t, err, errNoLeader)

	err = Errorf("journal: add member %d: %w: the id was removed", 5, errUnknown)
	require.Equal(t, "journal: add member 5: unknown member: the id was removed", err.Error())
	require.ErrorIs(t, err, errUnknown)

	err = Errorf("journal: %w", errNoLeader)
	require.Equal(t, "journal: no leader", err.Error())

	var halt *haltError
	err = Errorf("journal: read barrier: %w", Errorf("journal: wait: %w", &haltError{index: 7}))
	require.ErrorAs(t, err, &halt)
	require.Equal(t, 7, halt.index)
	require.Equal(t, "journal: read barrier: wait: halted at 7", err.Error())
}

func TestErrorfKeepsOtherPackagesNames(t *testing.T) {
	require.Equal(t, "journal: close log: pebble: closed", Errorf("journal: close log: %w", errors.New("pebble: closed")).Error())
	require.Equal(t, "image: backup: journal: closed", Errorf("image: backup: %w", errors.New("journal: closed")).Error())
	require.Equal(t, "no package here: journal: closed", Errorf("no package here: %w", errors.New("journal: closed")).Error())
}

func TestErrorfTrimsOnlyTheWrappedErrors(t *testing.T) {
	// A data dir named "journal" stays in the message.
	err := Errorf("journal: %s: %w", "journal", errors.New("pebble: corrupt"))
	require.Equal(t, "journal: journal: pebble: corrupt", err.Error())
	// An error that names the package further in is left whole.
	err = Errorf("journal: remove member %d: %w", 3, fmt.Errorf("remote: %w", errUnknown))
	require.Equal(t, "journal: remove member 3: remote: journal: unknown member", err.Error())
	require.ErrorIs(t, err, errUnknown)
}

func TestErrorfLeavesTheCallersArguments(t *testing.T) {
	args := []any{errNoLeader}
	require.Equal(t, "journal: propose: no leader", Errorf("journal: propose: %w", args...).Error())
	require.Same(t, errNoLeader, args[0])
}

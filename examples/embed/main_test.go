package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestControlPlaneFromAModuleOfItsOwn runs the downstream program: from a
// separate module, through the public frontend package only, three
// frontends start, a typed write with a precondition through a follower
// reaches a watch and a linearizable read on another follower, a second
// create fails its precondition, and a query is cancelled by the restart
// of a member it runs on.
func TestControlPlaneFromAModuleOfItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	require.NoError(t, run(ctx, t.TempDir(), &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	require.Regexp(t, `^watch: \S+ /orders at index \d+$`, lines[0])
	require.Regexp(t, `^read: /orders \{Buckets:16 Owner:sales\}, written at index \d+$`, lines[1])
	require.Regexp(t, `^query: .*3.*`, lines[2], "the cause names the restarted member")
}

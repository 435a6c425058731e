package frontend

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	fe "github.com/metatree/metatree/examples/frontend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startLeader starts one insecure frontend that bootstraps a cluster of
// its own, waits until it leads, and returns it with a context for the
// test (a minute); the frontend closes when the test ends.
func startLeader(t *testing.T) (*Frontend, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	f, err := Start(ctx, Config{Config: fe.Config{ID: 1, Dir: filepath.Join(t.TempDir(), "1"), Addr: freeAddr(t), Bootstrap: true, Insecure: true}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	waitFor(t, 20*time.Second, "a leader", func() bool { return f.Journal().Status().Leader == 1 })
	return f, ctx
}

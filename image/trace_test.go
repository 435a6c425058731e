package image

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// fsTrace records the filesystem operations of a Store (vfs.WithLogging),
// leaving out reads, which carry no durability.
type fsTrace struct {
	mu    sync.Mutex
	lines []string
	on    bool
}

func (tr *fsTrace) logf(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	if !tr.on || strings.HasPrefix(line, "open: ") || strings.HasPrefix(line, "read-at") {
		return
	}
	tr.lines = append(tr.lines, line)
}

func (tr *fsTrace) start() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.on, tr.lines = true, nil
}

func (tr *fsTrace) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	l := tr.lines
	tr.on, tr.lines = false, nil
	return l
}

// The order of the filesystem steps is the durability argument: the image
// is synced before it gets its name, the name is synced before the journal
// hears of it, and older images go only after that.
func TestCheckpointFilesystemSteps(t *testing.T) {
	tr := &fsTrace{}
	n := newNode(t, vfs.WithLogging(vfs.NewMem(), tr.logf))
	for _, k := range []int{100, 100} {
		n.j.append(k)
		_, err := n.cp.Checkpoint(context.Background())
		require.NoError(t, err)
	}
	n.j.append(100)
	tr.start()
	_, err := n.cp.Checkpoint(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{
		"close: /data/image/image.200", // the base image: header,
		"close: /data/image/image.200", // then the body into the shadow
		"create: /data/image/image.ckpt",
		"sync: /data/image/image.ckpt",
		"close: /data/image/image.ckpt",
		"rename: /data/image/image.ckpt -> /data/image/image.300",
		"open-dir: /data/image",
		"sync: /data/image",
		"close: /data/image",
		// (ImageWritten here)
		// Prune opens the old image to shred it; with no file descriptor
		// to truncate through (MemFS) it removes it at once.
		"open-read-write: /data/image/image.100",
		"close: /data/image/image.100",
		"remove: /data/image/image.100",
		"open-dir: /data/image",
		"sync: /data/image",
		"close: /data/image",
	}, tr.take())
}

func TestRestoreFilesystemSteps(t *testing.T) {
	ctx := context.Background()
	src := newPeer(t, 300, nil)
	tr := &fsTrace{}
	s := openStore(t, vfs.WithLogging(vfs.NewMem(), tr.logf), "/data", newKV())
	tr.start()
	require.NoError(t, s.Fetch(ctx, src.addr(), 300))
	require.Equal(t, []string{
		"create: /data/image/image.fetch",
		"sync: /data/image/image.fetch",
		"close: /data/image/image.fetch",
		"close: /data/image/image.fetch", // the header read back to verify it
		"rename: /data/image/image.fetch -> /data/image/image.300.fetched",
		"open-dir: /data/image",
		"sync: /data/image",
		"close: /data/image",
	}, tr.take())
	tr.start()
	require.NoError(t, s.Install(ctx, 300))
	lines := tr.take()
	require.Equal(t, []string{
		"rename: /data/image/image.300.fetched -> /data/image/image.300",
		"open-dir: /data/image",
		"sync: /data/image",
		"close: /data/image",
	}, lines[:4])
}

package image

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
)

// syncFault fails the fsyncs of the files (or directories) whose path is
// in paths, once armed.
type syncFault struct {
	armed atomic.Bool
	path  string
}

func (f *syncFault) String() string { return "syncFault" }

func (f *syncFault) MaybeError(op errorfs.Op) error {
	if f.armed.Load() && op.Path == f.path &&
		(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
		return errorfs.ErrInjected
	}
	return nil
}

// TestFailedImageSyncHaltsTheStore: an image write whose fsync fails (of
// the file, or of the directory after the rename) fails naming the
// operation and the file, leaves no half-written file, and halts the
// Store: a later write is refused although the disk works again, the
// images durable before are still served, and a new Store on the same dir
// opens and writes.
func TestFailedImageSyncHaltsTheStore(t *testing.T) {
	for _, tc := range []struct {
		name, path, msg string
	}{
		{"file", "/data/image/image.ckpt", "image: sync /data/image/image.ckpt"},
		{"dir", "/data/image", "image: sync dir /data/image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			fault := &syncFault{path: tc.path}
			var halts []error
			s := openStore(t, errorfs.Wrap(mem, fault), "/data", newKV(), func(c *Config) {
				c.OnHalt = func(err error) { halts = append(halts, err) }
			})
			writeKV(t, s, 10)
			select {
			case <-s.Halting():
				t.Fatal("Halting is closed before any failure")
			default:
			}

			fault.armed.Store(true)
			_, err := s.Write(context.Background(), Header{Index: 20, Term: 1, Membership: []byte("m")}, newKV().Save)
			require.ErrorIs(t, err, ErrHalted)
			require.ErrorIs(t, err, errorfs.ErrInjected)
			require.ErrorContains(t, err, tc.msg)
			require.ErrorIs(t, s.Halted(), ErrHalted)
			<-s.Halting() // closed by the halt: a journal watching it halts too
			names, err := mem.List("/data/image")
			require.NoError(t, err)
			require.NotContains(t, names, ckptTmpName, "no half-written image is left")

			fault.armed.Store(false)
			_, err = s.Write(context.Background(), Header{Index: 30, Term: 1, Membership: []byte("m")}, newKV().Save)
			require.ErrorIs(t, err, ErrHalted, "no write after the halt, though the disk works again")
			require.Len(t, halts, 1, "OnHalt is called once")
			require.ErrorIs(t, halts[0], errorfs.ErrInjected)
			_, err = s.Verify(10)
			require.NoError(t, err, "durable images are still served")
			require.NoError(t, s.Close())

			s2 := openStore(t, mem, "/data", newKV())
			require.NoError(t, s2.Halted())
			_, err = s2.Verify(10)
			require.NoError(t, err)
			writeKV(t, s2, 40)
		})
	}
}

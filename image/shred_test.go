package image

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// shredTestStep is the truncation step of the tests' small images.
const shredTestStep = 64

// shredEvent is one call of the shredded knob.
type shredEvent struct {
	name string
	size int64 // -1: removed
}

// shredWatch opens a store on the real disk (shredding needs a file
// descriptor) whose shredder reports every step on the returned channel.
func shredWatch(t *testing.T, dir string, rate int64) (*Store, chan shredEvent) {
	t.Helper()
	ev := make(chan shredEvent, 1024)
	s := openStore(t, vfs.Default, dir, newKV(), func(c *Config) {
		c.Keep = 1
		c.DeleteBytesPerSec = rate
		c.testingKnobs.shredStep = shredTestStep
		c.testingKnobs.shredded = func(name string, size int64) { ev <- shredEvent{name, size} }
	})
	return s, ev
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

func TestPruneShredsOldImages(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	ev := make(chan shredEvent, 1024)
	s := openStore(t, vfs.Default, dir, newKV(), func(c *Config) {
		c.Keep = 1
		c.DeleteBytesPerSec = 1 << 30
		c.testingKnobs.shredStep = shredTestStep
		c.testingKnobs.shredded = func(name string, size int64) {
			ev <- shredEvent{name, size}
			<-release // hold the shredder after each step until released
		}
	})
	// Let the shredder go before the Store closes, even when the test fails.
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	old := writeKV(t, s, 300)
	require.Greater(t, old.Size, int64(3*shredTestStep), "the test needs an image of several steps")
	writeKV(t, s, 400)
	require.NoError(t, s.Prune())

	// Out of every listing at once, under its trash name.
	idx, err := s.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{400}, idx)
	img := filepath.Join(dir, imageDirName)
	_, err = os.Stat(filepath.Join(img, "image.300"))
	require.ErrorIs(t, err, os.ErrNotExist)
	trash := filepath.Join(img, "image.300"+trashSuffix)

	// Shrunk a step at a time: the shredder is held after its first step.
	first := <-ev
	require.Equal(t, shredEvent{"image.300" + trashSuffix, old.Size - shredTestStep}, first)
	require.Equal(t, old.Size-shredTestStep, fileSize(t, trash))
	unblock()
	prev := first.size
	for e := range ev {
		require.Equal(t, "image.300"+trashSuffix, e.name)
		require.Less(t, e.size, prev)
		prev = e.size
		if e.size == -1 {
			break
		}
	}
	_, err = os.Stat(trash)
	require.ErrorIs(t, err, os.ErrNotExist)
	// The newest image is untouched.
	_, err = s.Verify(400)
	require.NoError(t, err)
}

func TestPruneRemovesAnImageBeingReadAtOnce(t *testing.T) {
	dir := t.TempDir()
	s, ev := shredWatch(t, dir, 1<<30)
	old := writeKV(t, s, 300)
	writeKV(t, s, 400)

	// A reader (a peer being served, a checkpoint loading its base) holds
	// the old image open while it is pruned.
	_, f, size, err := s.openImage("image.300")
	require.NoError(t, err)
	require.NoError(t, s.Prune())
	img := filepath.Join(dir, imageDirName)
	for _, n := range []string{"image.300", "image.300" + trashSuffix} {
		_, err := os.Stat(filepath.Join(img, n))
		require.ErrorIs(t, err, os.ErrNotExist, n)
	}
	// The reader still has every byte, and they check out.
	require.Equal(t, old.Size, size)
	_, err = readImage(io.NewSectionReader(f, 0, size), size, func(r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, s.Close())
	require.Empty(t, ev, "a file being read must not be truncated")
}

// Prune discards old images, fetched images and quarantined corrupt ones
// through the trash; whichever a crash left there, the next Open shreds it,
// and a .trash file that is not the Store's stays.
func TestOpenShredsLeftoverTrash(t *testing.T) {
	for _, suffix := range []string{"", fetchedSuffix, corruptSuffix} {
		name := "image.300" + suffix + trashSuffix
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, vfs.Default, dir, newKV())
			writeKV(t, s, 300)
			require.NoError(t, s.Close())
			// A crash after Prune renamed the file to the trash.
			img := filepath.Join(dir, imageDirName)
			trash := filepath.Join(img, name)
			require.NoError(t, os.Rename(filepath.Join(img, "image.300"), trash))
			foreign := filepath.Join(img, "notes.trash")
			require.NoError(t, os.WriteFile(foreign, []byte("not an image"), 0o600))

			_, ev := shredWatch(t, dir, 1<<30)
			// The bound only turns a file Open ignores into a failure
			// instead of a hang; shredding it takes milliseconds.
			giveUp := time.After(30 * time.Second)
			for removed := false; !removed; {
				select {
				case e := <-ev:
					require.Equal(t, name, e.name)
					removed = e.size == -1
				case <-giveUp:
					t.Fatalf("Open left %s in place", name)
				}
			}
			_, err := os.Stat(trash)
			require.ErrorIs(t, err, os.ErrNotExist)
			_, err = os.Stat(foreign)
			require.NoError(t, err)
		})
	}
}

func TestCloseStopsShredding(t *testing.T) {
	dir := t.TempDir()
	// One byte a second: after its first step the shredder waits for
	// longer than any test runs.
	s, ev := shredWatch(t, dir, 1)
	old := writeKV(t, s, 300)
	writeKV(t, s, 400)
	require.NoError(t, s.Prune())
	first := <-ev
	require.Equal(t, old.Size-shredTestStep, first.size)
	require.NoError(t, s.Close()) // returns without waiting out the pause

	// The trash is still there, and the next Open shreds it.
	trash := filepath.Join(dir, imageDirName, "image.300"+trashSuffix)
	require.Equal(t, first.size, fileSize(t, trash))
	_, ev = shredWatch(t, dir, 1<<30)
	for e := range ev {
		if e.size == -1 {
			break
		}
	}
	_, err := os.Stat(trash)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// bigShredStore opens a store on the real disk whose shredder reports each
// step on the returned channel and then waits for hold (nil: no wait),
// holding images of a kv state of n entries: bigger than the buffer a
// reader fills at once.
func bigShredStore(t *testing.T, dir string, hold chan struct{}) (*Store, chan shredEvent) {
	t.Helper()
	ev := make(chan shredEvent, 1024)
	s := openStore(t, vfs.Default, dir, newKV(), func(c *Config) {
		c.Keep = 1
		c.DeleteBytesPerSec = 1 << 30
		c.testingKnobs.shredStep = 64 << 10
		c.testingKnobs.shredded = func(name string, size int64) {
			ev <- shredEvent{name, size}
			if hold != nil {
				<-hold
			}
		}
	})
	return s, ev
}

// writeBig writes an image at index whose body is a kv state of some 2 MiB.
func writeBig(t *testing.T, s *Store, index uint64) Info {
	t.Helper()
	st := newKV()
	for i := range 100_000 {
		st.m[fmt.Sprintf("key%06d", i)] = "value"
	}
	st.index = index
	info, err := s.Write(t.Context(), Header{Index: index, Term: 1, Membership: []byte("m")}, st.Save)
	require.NoError(t, err)
	return info
}

// TestPruneNeverTruncatesAnImageReadOutsideTheStore: a reader outside the
// Store (metactl image status|verify on a live data dir, in its own
// process) holds an old image open through ReadFile while the node prunes
// it. The image is removed at once, not shredded under the reader, whose
// read checks out.
func TestPruneNeverTruncatesAnImageReadOutsideTheStore(t *testing.T) {
	dir := t.TempDir()
	s, ev := bigShredStore(t, dir, nil)
	old := writeBig(t, s, 100_000)
	require.Greater(t, old.Size, int64(1<<20), "the test needs an image bigger than the reader's buffer")
	writeKV(t, s, 100_001)
	img := filepath.Join(dir, imageDirName)
	info, err := ReadFile(vfs.Default, filepath.Join(img, "image.100000"), func(r io.Reader) error {
		require.NoError(t, s.Prune())
		if _, err := os.Stat(filepath.Join(img, "image.100000"+trashSuffix)); err == nil {
			for e := range ev { // shredding: wait until it is done
				if e.size == -1 {
					break
				}
			}
		}
		_, err := io.Copy(io.Discard, r)
		return err
	})
	require.NoError(t, err, "the reader outside the Store reads the image whole")
	require.Equal(t, old.CRC, info.CRC)
	require.Empty(t, ev, "an image read outside the Store is not truncated")
	for _, n := range []string{"image.100000", "image.100000" + trashSuffix} {
		_, err := os.Stat(filepath.Join(img, n))
		require.ErrorIs(t, err, os.ErrNotExist, n)
	}
}

// TestImageBeingShreddedReadsAsRemovedNotCorrupt: a reader outside the
// Store that opens an image the shredder is truncating is told that the
// image is being removed (ErrNotFound), not that it is corrupt.
func TestImageBeingShreddedReadsAsRemovedNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	hold := make(chan struct{})
	s, ev := bigShredStore(t, dir, hold)
	unblock := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(unblock)
	writeBig(t, s, 100_000)
	writeKV(t, s, 100_001)
	require.NoError(t, s.Prune())
	first := <-ev // the shredder is held after its first step
	require.Equal(t, "image.100000"+trashSuffix, first.name)
	trash := filepath.Join(dir, imageDirName, first.name)
	for _, read := range []func() error{
		func() error { _, err := ReadHeader(vfs.Default, trash); return err },
		func() error { _, err := ReadFile(vfs.Default, trash, nil); return err },
	} {
		err := read()
		require.ErrorIs(t, err, ErrNotFound)
		require.NotErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, "the node is removing it")
	}
	unblock()
	for e := range ev {
		if e.size == -1 {
			break
		}
	}
}

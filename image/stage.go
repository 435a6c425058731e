package image

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Stager is what a State implements to be restored faster (catalog.Tree
// does): Stage decodes an image body aside, with the checks Load makes and
// without touching the live state, and returns commit, which makes the
// decoded content live. A restore then decodes the image while it
// downloads, and Install swaps it in without reading the file again: the
// restore takes about as long as the slower of the transfer (with its
// fsync) and the decode, not their sum. The live state still changes only
// in Install, after the file is verified and durable.
type Stager interface {
	Stage(r io.Reader) (commit func(), err error)
}

// staged is an image decoded while it downloaded, waiting for Install.
type staged struct {
	index  uint64
	commit func()
}

// stager decodes a download as it is written: a goroutine reads the file
// behind the writer (what the writer has handed to the file so far), so
// neither waits for the other and no copy of the image is held in memory.
// A decode that fails only loses the time it took: Install then loads the
// file, and reports what is wrong, if anything is.
type stager struct {
	fs   vfs.FS
	path string
	done chan struct{}

	mu       sync.Mutex
	cond     *sync.Cond
	written  int64 // bytes in the file so far
	f        vfs.File
	openErr  error
	stopped  bool  // the decoder is done: open nothing more
	complete bool  // no more bytes will come
	abort    error // the download failed

	// Set by the goroutine before done closes.
	index  uint64
	commit func()
	err    error
}

// startStager starts decoding the file at path (created by the caller's
// write, which reports progress through wrote and ends with end).
func startStager(st Stager, fs vfs.FS, path string) *stager {
	g := &stager{fs: fs, path: path, done: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	go func() {
		defer close(g.done)
		defer func() {
			g.mu.Lock()
			g.stopped = true
			if g.f != nil {
				g.f.Close()
			}
			g.mu.Unlock()
		}()
		t := &tailReader{g: g}
		br := bufio.NewReaderSize(t, 1<<20)
		h, _, err := decodeHeader(br)
		if err == nil {
			g.index = h.Index
			g.commit, err = st.Stage(br)
		}
		g.err = err
	}()
	return g
}

// wrote records that the file now holds n bytes. The first call opens the
// file for the decoder, on the writer's goroutine: the handle must exist
// before the finished file is renamed.
func (g *stager) wrote(n int64) {
	g.mu.Lock()
	if g.f == nil && g.openErr == nil && !g.stopped {
		g.f, g.openErr = g.fs.Open(g.path)
	}
	g.written = n
	g.mu.Unlock()
	g.cond.Broadcast()
}

// end says that no more bytes will come: the file is complete (err ==
// nil), or the download failed (the decoder stops at its next read). It
// may be called again with an error found later.
func (g *stager) end(err error) {
	g.mu.Lock()
	g.complete = true
	if err != nil && g.abort == nil {
		g.abort = err
	}
	g.mu.Unlock()
	g.cond.Broadcast()
}

// wait waits for the decoder and returns the staged image when the whole
// file was decoded and the download did not fail.
func (g *stager) wait() *staged {
	<-g.done
	g.mu.Lock()
	abort := g.abort
	g.mu.Unlock()
	if abort != nil || g.err != nil || g.commit == nil {
		return nil
	}
	return &staged{index: g.index, commit: g.commit}
}

var errDownloadFailed = errors.New("image: the download failed")

// tailReader reads the file being written, waiting for bytes the writer
// has not handed over yet.
type tailReader struct {
	g   *stager
	off int64
}

func (t *tailReader) Read(p []byte) (int, error) {
	g := t.g
	g.mu.Lock()
	for g.written <= t.off && !g.complete {
		g.cond.Wait()
	}
	avail, abort, f, openErr := g.written-t.off, g.abort, g.f, g.openErr
	g.mu.Unlock()
	switch {
	case abort != nil:
		return 0, errors.Join(errDownloadFailed, abort)
	case openErr != nil:
		return 0, openErr
	case avail <= 0:
		return 0, io.EOF
	}
	if int64(len(p)) > avail {
		p = p[:avail]
	}
	n, err := f.ReadAt(p, t.off)
	t.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

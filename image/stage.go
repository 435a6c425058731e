package image

import (
	"bufio"
	"io"
)

// Stager is what a State implements to be restored faster (catalog.Tree
// does): Stage decodes an image body aside, with the checks Load makes and
// without touching the live state, and returns commit, which makes the
// decoded content live. A restore then decodes the image while it
// downloads, and Install swaps it in without reading the file again: the
// restore takes about as long as the slower of the transfer and the decode,
// not their sum. The live state still changes only in Install, after the
// file is verified and durable.
type Stager interface {
	Stage(r io.Reader) (commit func(), err error)
}

// staged is an image decoded while it downloaded, waiting for Install.
type staged struct {
	index  uint64
	commit func()
}

// stager decodes a download as it streams: Write feeds a pipe that a
// goroutine reads the image header and then the body from. A decode that
// fails drains the rest, so it never holds the download up: staging only
// saves time, and Install falls back to loading the file (which reports
// what is wrong, if anything is).
type stager struct {
	pw     *io.PipeWriter
	done   chan struct{}
	index  uint64 // the header's index
	commit func()
	err    error
}

// startStager starts the decoding goroutine; the caller must call finish.
func startStager(st Stager) *stager {
	pr, pw := io.Pipe()
	g := &stager{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		br := bufio.NewReaderSize(pr, 1<<20)
		h, _, err := decodeHeader(br)
		if err == nil {
			g.index = h.Index
			g.commit, err = st.Stage(br)
		}
		g.err = err
		// The trailer, or whatever is left after an error.
		_, _ = io.Copy(io.Discard, pr)
	}()
	return g
}

// Write passes p to the decoder; it returns once the decoder has read it,
// so the caller may reuse p.
func (g *stager) Write(p []byte) (int, error) { return g.pw.Write(p) }

// finish ends the stream (complete, or cut short by err) and waits for the
// decoder. It returns the staged image only when the whole download was
// decoded and err is nil.
func (g *stager) finish(err error) *staged {
	if err != nil {
		g.pw.CloseWithError(err)
	} else {
		g.pw.Close()
	}
	<-g.done
	if err != nil || g.err != nil || g.commit == nil {
		return nil
	}
	return &staged{index: g.index, commit: g.commit}
}

package image

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metatree/metatree/internal/operr"
)

// flight is one restore in progress; callers that arrive meanwhile wait on
// done and share err.
type flight struct {
	index uint64
	done  chan struct{}
	err   error
}

// Fetch makes the image at exactly index durable in the local data dir,
// fetched from the peer at addr (host:port or a base URL). It is the
// journal's hook for an incoming raft snapshot, called before raft sees it.
//
// Restores are single-flight per data dir: while one runs, every other
// Fetch waits for it and, when it was for the same index, returns its
// result (a caller whose own context is still alive retries when the
// running one was cancelled). The image streams into image.fetch, its
// checksum is verified against the trailer and the peer's header, it is
// fsynced and renamed to image.<index>.fetched; Install makes it live. An
// image already present returns at once.
func (s *Store) Fetch(ctx context.Context, addr string, index uint64) error {
	return s.fetch(ctx, addr, index, true)
}

// fetch is Fetch; stage says whether a Stager state decodes the image while
// it downloads, for an Install to come (adopt never installs).
func (s *Store) fetch(ctx context.Context, addr string, index uint64, stage bool) error {
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.haveLocked(index) {
			// A fetched image released earlier is raft's again.
			if _, err := s.fs.Stat(s.path(imageName(index) + fetchedSuffix)); err == nil {
				s.mu.pinned[index] = true
			}
			s.mu.Unlock()
			return nil
		}
		if f := s.mu.flight; f != nil {
			s.mu.Unlock()
			if k := s.cfg.testingKnobs.fetchJoined; k != nil {
				k(index)
			}
			select {
			case <-f.done:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if f.index != index {
				continue
			}
			if f.err != nil && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
				continue // the runner gave up, this fetch has not
			}
			return f.err
		}
		f := &flight{index: index, done: make(chan struct{})}
		s.mu.flight = f
		s.mu.Unlock()

		err := s.runFetch(ctx, addr, index, stage)

		s.mu.Lock()
		f.err = err
		s.mu.flight = nil
		if err == nil {
			s.mu.pinned[index] = true
		}
		s.mu.Unlock()
		close(f.done)
		return err
	}
}

// haveLocked reports whether image index is already durable here.
func (s *Store) haveLocked(index uint64) bool {
	for _, n := range []string{imageName(index), imageName(index) + fetchedSuffix} {
		if _, err := s.fs.Stat(s.path(n)); err == nil {
			return true
		}
	}
	return false
}

func (s *Store) runFetch(ctx context.Context, addr string, index uint64, stage bool) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.closing, func() { cancel(ErrClosed) })
	defer stop()
	start := time.Now()
	info, err := s.download(ctx, addr, index, stage)
	if err != nil {
		s.logger.Error("fetching an image failed", "peer", addr, "index", index, "err", err)
		return operr.Errorf("image: fetch index %d from %s: %w", index, addr, err)
	}
	s.logger.Info("fetched image", "peer", addr, "index", index, "bytes", info.Size, "took", time.Since(start))
	return nil
}

// baseURL is addr as a URL: https when the Store dials with TLS.
func (s *Store) baseURL(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimSuffix(addr, "/")
	}
	if s.cfg.TLS != nil {
		return "https://" + addr
	}
	return "http://" + addr
}

// get sends GET path to the peer with the cluster id and token, bounding
// the wait for each chunk of the response by FetchIdleTimeout.
func (s *Store) get(ctx context.Context, addr, path string) (*http.Response, *idleTimer, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	idle := &idleTimer{d: s.cfg.FetchIdleTimeout, cancel: cancel}
	idle.start()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.baseURL(addr)+path, nil)
	if err != nil {
		idle.stop()
		return nil, nil, err
	}
	if id := s.ClusterID(); id != "" {
		req.Header.Set(headerClusterID, id)
	}
	if s.cfg.Token != "" {
		req.Header.Set(headerToken, s.cfg.Token)
	}
	for k, v := range s.extraHeader {
		req.Header[k] = v
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		idle.stop()
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			// Only the cause stays in the chain: the transport's error wraps
			// context.Canceled merely because the cause cancelled the request.
			err = fmt.Errorf("%w (%s)", cause, err.Error())
		}
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		defer idle.stop()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		text := strings.TrimSpace(string(msg))
		switch resp.StatusCode {
		case http.StatusNotFound:
			return nil, nil, fmt.Errorf("%w: peer says %q", ErrNotFound, text)
		case http.StatusConflict:
			return nil, nil, fmt.Errorf("%w: peer says %q", ErrClusterMismatch, text)
		case http.StatusForbidden, http.StatusUnauthorized:
			return nil, nil, fmt.Errorf("%w: peer says %q", ErrUnauthorized, text)
		}
		return nil, nil, fmt.Errorf("image: peer answered %s: %q", resp.Status, text)
	}
	resp.Body = &idleReader{r: resp.Body, t: idle, ctx: ctx}
	return resp, idle, nil
}

var errIdle = errors.New("image: peer sent nothing for too long")

// idleTimer cancels a request that makes no progress for d.
type idleTimer struct {
	d      time.Duration
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	t      *time.Timer
}

func (it *idleTimer) start() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.t = time.AfterFunc(it.d, func() { it.cancel(fmt.Errorf("%w (%v)", errIdle, it.d)) })
}

func (it *idleTimer) touch() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.t.Reset(it.d)
}

func (it *idleTimer) stop() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.t.Stop()
	it.cancel(nil)
}

type idleReader struct {
	r   io.ReadCloser
	t   *idleTimer
	ctx context.Context
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.t.touch()
	}
	if err != nil && err != io.EOF {
		if cause := context.Cause(r.ctx); cause != nil {
			err = cause
		}
	}
	return n, err
}

func (r *idleReader) Close() error { return r.r.Close() }

// RemoteLatest asks the peer at addr for its newest image's metadata.
func (s *Store) RemoteLatest(ctx context.Context, addr string) (RemoteInfo, error) {
	resp, idle, err := s.get(ctx, addr, PathPrefix+"latest")
	if err != nil {
		return RemoteInfo{}, operr.Errorf("image: ask %s for its newest image: %w", addr, err)
	}
	defer idle.stop()
	defer resp.Body.Close()
	var ri RemoteInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ri); err != nil {
		return RemoteInfo{}, operr.Errorf("image: %s sent bad image metadata: %w", addr, err)
	}
	return ri, nil
}

// download streams image index from addr into image.fetch, verifying it on
// the way, and renames it to image.<index>.fetched.
func (s *Store) download(ctx context.Context, addr string, index uint64, stageIt bool) (Info, error) {
	resp, idle, err := s.get(ctx, addr, PathPrefix+strconv.FormatUint(index, 10))
	if err != nil {
		return Info{}, err
	}
	defer idle.stop()
	defer resp.Body.Close()
	wantCRC, err := s.checkResponse(resp, index)
	if err != nil {
		return Info{}, err
	}
	tmp := s.path(fetchTmpName)
	var stage *stager
	var wrote func(int64)
	if st, ok := s.cfg.State.(Stager); ok && stageIt {
		stage = startStager(st, s.fs, tmp)
		wrote = stage.wrote
	}
	th, n, err := s.receive(ctx, resp, tmp, wrote)
	if stage != nil {
		// The decoder reads on to the end while the file is checked.
		stage.end(err)
	}
	if err == nil {
		err = s.checkDownload(tmp, th, n, index, wantCRC)
		if err != nil {
			if rerr := s.fs.Remove(tmp); rerr != nil && !isNotExist(rerr) {
				s.logger.Warn("could not remove a rejected download", "file", tmp, "err", rerr)
			}
		}
	}
	if err == nil {
		err = s.renameDurably(tmp, s.path(imageName(index)+fetchedSuffix))
	}
	if stage != nil {
		stage.end(err)
		st := stage.wait()
		if err == nil {
			if st == nil || st.index != index {
				s.logger.Warn("the image could not be decoded while it downloaded; Install will load the file", "index", index, "err", stage.err)
				st = nil
			}
			s.mu.Lock()
			s.mu.staged = st
			s.mu.Unlock()
		}
	}
	if err != nil {
		return Info{}, err
	}
	return Info{Name: imageName(index) + fetchedSuffix, Size: n}, nil
}

// checkResponse checks an image response's headers against the request
// and the size limit, and returns the CRC32C the peer announces.
func (s *Store) checkResponse(resp *http.Response, index uint64) (uint32, error) {
	size := resp.ContentLength
	if size < 0 {
		return 0, errors.New("image: peer sent no Content-Length")
	}
	if size > s.cfg.MaxImageBytes {
		return 0, fmt.Errorf("image: peer offers %d bytes, over the %d byte limit (Config.MaxImageBytes)", size, s.cfg.MaxImageBytes)
	}
	if got := resp.Header.Get(headerIndex); got != strconv.FormatUint(index, 10) {
		return 0, fmt.Errorf("image: asked for index %d, peer sent %q", index, got)
	}
	wantCRC, err := strconv.ParseUint(resp.Header.Get(headerCRC), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("image: peer sent a bad %s header %q", headerCRC, resp.Header.Get(headerCRC))
	}
	return uint32(wantCRC), nil
}

// receive streams the response body into the new file tmp (fsynced), and
// hashes it on the way for checkDownload.
func (s *Store) receive(ctx context.Context, resp *http.Response, tmp string, wrote func(int64)) (*tailHasher, int64, error) {
	size := resp.ContentLength
	th := &tailHasher{sum: newCRC()}
	_, n, err := s.writeFile(ctx, tmp, wrote, func(w io.Writer) (uint32, int64, error) {
		// Hash before writing: a vfs.File may modify what it is given.
		n, err := io.Copy(io.MultiWriter(th, w), io.LimitReader(resp.Body, size+1))
		if err != nil {
			return 0, n, fmt.Errorf("receive: %w", err)
		}
		if n != size {
			return 0, n, corruptf("peer sent %d bytes, announced %d", n, size)
		}
		return 0, n, nil
	})
	return th, n, err
}

// checkDownload verifies a downloaded (and synced) image before it gets its
// durable name: the trailer against the checksum of the stream, the header,
// read back from the file, against the request.
func (s *Store) checkDownload(tmp string, th *tailHasher, n int64, index uint64, wantCRC uint32) error {
	f, err := s.fs.Open(tmp)
	if err != nil {
		return operr.Errorf("image: open %s: %w", tmp, err)
	}
	defer f.Close()
	h, raw, err := decodeHeader(bufio.NewReader(io.NewSectionReader(f, 0, n)))
	if err != nil {
		return err
	}
	if h.Index != index {
		return corruptf("asked for index %d, the image holds index %d", index, h.Index)
	}
	bodyLen := n - int64(len(raw)) - trailerLen
	if bodyLen < 0 {
		return corruptf("truncated: %d bytes", n)
	}
	crc, err := decodeTrailer(th.tail, th.sum, uint64(bodyLen))
	if err != nil {
		return err
	}
	if crc != wantCRC {
		return corruptf("checksum %08x differs from the %08x the peer announced", crc, wantCRC)
	}
	return s.checkClusterID(imageName(index), h.ClusterID)
}

// tailHasher hashes everything written to it except the last trailerLen
// bytes, which it keeps: the trailer's checksum covers the bytes before it.
type tailHasher struct {
	sum  hash.Hash32
	tail []byte
}

func (t *tailHasher) Write(p []byte) (int, error) {
	if len(p) >= trailerLen {
		t.sum.Write(t.tail)
		t.sum.Write(p[:len(p)-trailerLen])
		t.tail = append(t.tail[:0], p[len(p)-trailerLen:]...)
		return len(p), nil
	}
	t.tail = append(t.tail, p...)
	if extra := len(t.tail) - trailerLen; extra > 0 {
		t.sum.Write(t.tail[:extra])
		t.tail = append(t.tail[:0], t.tail[extra:]...)
	}
	return len(p), nil
}

// adopt makes the peer's image at index a durable local image.<index>
// without loading it into the live state: the caller's state is already
// past index, and images are deterministic, so the peer's file is the one
// this node would write. The download is Fetch's (verified, single-flight,
// crash safe: image.fetch, fsync, image.<index>.fetched); check then sees
// the image's header, and only if it accepts does the file get its final
// name (renamed, directory fsynced). A rejected file is removed.
func (s *Store) adopt(ctx context.Context, addr string, index uint64, check func(Header) error) (Info, error) {
	// No staging: the image is never installed here, and a decoded copy
	// would hold a second catalog in memory on the leader adoption spares.
	if err := s.fetch(ctx, addr, index, false); err != nil {
		return Info{}, err
	}
	// A Fetch for raft that this one joined may have staged it: drop that.
	s.mu.Lock()
	if st := s.mu.staged; st != nil && st.index == index {
		s.mu.staged = nil
	}
	s.mu.Unlock()
	// Under the restore lock: no Install or restore renames these files
	// meanwhile.
	if err := s.acquire(ctx); err != nil {
		return Info{}, err
	}
	defer s.release()
	name := imageName(index)
	if _, err := s.fs.Stat(s.path(name)); err == nil {
		// Already installed (Fetch found it): nothing to rename.
		info, err := s.readHeader(name)
		if err != nil {
			return Info{}, err
		}
		if err := check(info.Header); err != nil {
			return Info{}, operr.Errorf("image: %s: %w", s.path(name), err)
		}
		return info, nil
	} else if !isNotExist(err) {
		return Info{}, operr.Errorf("image: stat %s: %w", s.path(name), err)
	}
	fetched := name + fetchedSuffix
	info, err := s.readHeader(fetched)
	if err == nil {
		if err = check(info.Header); err != nil {
			err = operr.Errorf("image: image %d from %s: %w", index, addr, err)
		}
	}
	if err != nil {
		s.discardFetched(index)
		return Info{}, err
	}
	if err := s.promote(index); err != nil {
		return Info{}, err
	}
	s.unpin(index)
	info.Name = name
	return info, nil
}

// ReleaseFetched implements journal.FetchReleaser: raft did not take the
// image Fetch made durable at index, so no Install for it follows. The
// state decoded while it downloaded is dropped and the file is no longer
// pinned (Prune removes it once an image at or past it is installed; a
// Fetch of the same index pins it again). It does no I/O.
func (s *Store) ReleaseFetched(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.mu.staged; st != nil && st.index == index {
		s.mu.staged = nil
	}
	delete(s.mu.pinned, index)
}

// unpin releases fetched images up to index from the prune guard: index is
// now an installed image, and raft never applies an older one.
func (s *Store) unpin(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.mu.pinned {
		if i <= index {
			delete(s.mu.pinned, i)
		}
	}
}

// discardFetched removes image.<index>.fetched (an image adopt rejected).
func (s *Store) discardFetched(index uint64) {
	s.mu.Lock()
	delete(s.mu.pinned, index)
	s.mu.Unlock()
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	if err := s.removeFiles(imageName(index) + fetchedSuffix); err != nil {
		s.logger.Warn("could not remove a rejected image", "err", err)
	}
}

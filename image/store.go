package image

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/internal/formatversion"
	"github.com/metatree/metatree/internal/operr"
)

// State is the replicated state an image holds: a *catalog.Tree satisfies
// it. Apply is called in log order from one goroutine (shadow replay); Save
// must write a deterministic stream (the same entries give byte-identical
// images on every replica); Load must replace the whole content atomically
// and leave it unchanged when it returns an error. A Load error that wraps
// ErrUnknownVersion (catalog.ErrUnknownVersion does) says the body is of a
// format this build does not read: the image is reported as such and kept,
// where any other Load error marks it corrupt.
type State interface {
	Apply(index uint64, data []byte) any
	Save(w io.Writer) error
	Load(r io.Reader) error
}

// Config configures a Store. Zero fields take the documented defaults.
type Config struct {
	// Dir is the node's data dir; images live in Dir/image. Required.
	Dir string
	// FS is the filesystem. The default is vfs.Default (the real disk);
	// tests pass vfs.NewMem or vfs.NewCrashableMem.
	FS vfs.FS
	// State is the live state that LoadLatest and Install load images into.
	// Required.
	State State
	// ClusterID, when known before the journal opens, is checked against
	// every image. When empty, the first image loaded or fetched sets it,
	// and SetClusterID checks it later.
	ClusterID string
	// Token is the cluster's join token: sent with every fetch and required
	// of every request to the Handler. Empty means no token.
	Token string
	// OnHalt, if set, is called once, on the goroutine whose fsync or
	// rename failed, when the Store halts (ErrHalted). The images share
	// the disk with the journal: a host stops the node's writes there too
	// (journal.Journal.Halt).
	OnHalt func(err error)
	// Keep is how many images to keep. The default is 2; at least 1.
	Keep int
	// HTTPClient fetches images from peers. The default is a client with no
	// overall timeout: fetches are bounded by their context and by
	// FetchIdleTimeout instead, so a large image on a slow link is not cut
	// off while it makes progress.
	HTTPClient *http.Client
	// TLS, when set, is the client side of mutual TLS between members:
	// fetches go to https://<addr> with it (through the default
	// HTTPClient), and the Handler refuses (403) a request without a client
	// certificate the serving host verified against the cluster's CA. The
	// host serves the Handler over TLS. Default: none.
	TLS *tls.Config
	// FetchIdleTimeout aborts a fetch that receives nothing for this long.
	// The default is 30 s.
	FetchIdleTimeout time.Duration
	// MaxImageBytes refuses fetched images larger than this. The default is
	// 1 TiB.
	MaxImageBytes int64
	// DeleteBytesPerSec is the pace at which old images are removed: they
	// are truncated a step at a time in the background, so that a
	// filesystem that discards freed blocks (ext4 -o discard) does not
	// stall every fsync on the disk, the journal's included, while it
	// trims a whole image (see shred.go). The default is 256 MiB/s; a
	// negative value removes them at once.
	DeleteBytesPerSec int64
	// Logger receives warnings (fallbacks, quarantined files) and errors.
	// The default discards.
	Logger *slog.Logger

	testingKnobs testingKnobs
}

type testingKnobs struct {
	// fetchJoined is called when a Fetch joins a restore already running.
	fetchJoined func(index uint64)
	// shredStep replaces the truncation step of old images (8 MiB).
	shredStep int64
	// shredded is called after each truncation of an old image with its
	// new size, and with -1 once it is removed.
	shredded func(name string, size int64)
}

const (
	imageDirName  = "image"
	lockName      = "LOCK"
	ckptTmpName   = "image.ckpt"
	fetchTmpName  = "image.fetch"
	imagePrefix   = "image."
	fetchedSuffix = ".fetched"
	corruptSuffix = ".corrupt"
)

// Store owns the image directory of one data dir: writing, verifying,
// listing and pruning images, loading them into the live state, serving and
// fetching them. It implements the journal's Snapshots hook. It is safe for
// concurrent use.
type Store struct {
	cfg    Config
	fs     vfs.FS
	dir    string
	lock   io.Closer
	logger *slog.Logger

	// restoreSem is the one lock per data dir under which images are loaded
	// into the live state and restores run: LoadLatest, a Fetch's download
	// and Install never overlap.
	restoreSem chan struct{}
	// writeMu serialises writers of image.ckpt.
	writeMu sync.Mutex
	// dirMu serialises renames and removals in the directory.
	dirMu sync.Mutex
	// closing is cancelled by Close: it stops a download in progress.
	closing     context.Context
	cancelClose context.CancelFunc
	// restores counts images installed from a peer (Install), for
	// Collector.
	restores atomic.Uint64
	// halted is the first failed fsync or rename (see ErrHalted).
	halted atomic.Pointer[error]
	// checkpointer is the Checkpointer writing this Store's images, while
	// it runs: RequestImage asks it for one.
	checkpointer atomic.Pointer[Checkpointer]
	// haltc is closed when the Store halts (see Halting).
	haltc chan struct{}

	mu struct {
		sync.Mutex
		closed    bool
		clusterID string
		// flight is the restore running now, if any.
		flight *flight
		// pinned images are fetched and not yet installed: never pruned.
		pinned map[uint64]bool
		// logBase is the index the journal's log starts after (Retain):
		// Prune keeps the newest image at or below it. retained says
		// Retain was called: a logBase of 0 is then a log that starts at
		// its first entry, not an unknown one.
		logBase  uint64
		retained bool
		// staged is the last fetched image, decoded while it downloaded
		// (when State is a Stager), until Install makes it live.
		staged *staged
		// readers counts the open readers of each image file (by name):
		// Prune does not shred those.
		readers map[string]int
		// trash is what the shredder has still to remove.
		trash []*trashFile
	}
	// extraHeader is sent with every request to a peer (Backup's).
	extraHeader http.Header

	trashWake    chan struct{} // wakes the shredder
	shredderDone chan struct{} // closed when the shredder has returned
}

// WithDefaults returns a copy of c in which every zero field that has a
// default holds it: the configuration Open runs with. Required fields (Dir,
// State) stay as they are; nothing is validated. It is the one place the
// defaults live.
func (c Config) WithDefaults() Config {
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Keep == 0 {
		c.Keep = 2
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
		if c.TLS != nil {
			c.HTTPClient.Transport = &http.Transport{TLSClientConfig: c.TLS, Proxy: http.ProxyFromEnvironment}
		}
	}
	if c.FetchIdleTimeout == 0 {
		c.FetchIdleTimeout = 30 * time.Second
	}
	if c.MaxImageBytes == 0 {
		c.MaxImageBytes = 1 << 40
	}
	if c.DeleteBytesPerSec == 0 {
		c.DeleteBytesPerSec = 256 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Open opens (creating if needed) the image directory under cfg.Dir, locks
// it against a second Store, and removes temporary files a crash left.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("image: Config.Dir is required")
	}
	if cfg.State == nil {
		return nil, errors.New("image: Config.State is required")
	}
	cfg = cfg.WithDefaults()
	if cfg.Keep < 1 {
		return nil, fmt.Errorf("image: Config.Keep is %d, must be at least 1", cfg.Keep)
	}
	s := &Store{
		cfg:          cfg,
		fs:           cfg.FS,
		dir:          cfg.FS.PathJoin(cfg.Dir, imageDirName),
		logger:       cfg.Logger.With("component", "image"),
		restoreSem:   make(chan struct{}, 1),
		trashWake:    make(chan struct{}, 1),
		shredderDone: make(chan struct{}),
		haltc:        make(chan struct{}),
	}
	s.mu.clusterID = cfg.ClusterID
	s.mu.pinned = make(map[uint64]bool)
	s.mu.readers = make(map[string]int)
	s.closing, s.cancelClose = context.WithCancel(context.Background())
	if err := mkdirAllDurably(s.fs, s.dir); err != nil {
		s.cancelClose()
		return nil, err
	}
	lock, err := s.fs.Lock(s.fs.PathJoin(s.dir, lockName))
	if err != nil {
		s.cancelClose()
		return nil, operr.Errorf("image: lock %s (another Store has this data dir open?): %w", s.dir, err)
	}
	s.lock = lock
	if err := s.removeTemps(); err != nil {
		s.cancelClose()
		lock.Close()
		return nil, err
	}
	go s.shredder()
	if err := s.queueLeftoverTrash(); err != nil {
		s.Close()
		return nil, operr.Errorf("image: old images left to remove in %s: %w", s.dir, err)
	}
	return s, nil
}

// Close stops a download in progress, waits for a running load or restore,
// and releases the directory lock. Restores still waiting fail with
// ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.mu.staged = nil
	s.mu.Unlock()
	s.cancelClose()
	<-s.shredderDone
	// Wait for a running load or restore before releasing the lock.
	s.restoreSem <- struct{}{}
	defer func() { <-s.restoreSem }()
	return s.lock.Close()
}

// Dir returns the image directory (Dir/image).
func (s *Store) Dir() string { return s.dir }

// ClusterID returns the cluster id the Store checks images against ("" while
// unknown).
func (s *Store) ClusterID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.clusterID
}

// SetClusterID tells the Store the journal's cluster id. If an image from
// another cluster was already loaded or fetched it returns
// ErrClusterMismatch: the data dir mixes two clusters and must not start.
func (s *Store) SetClusterID(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.clusterID != "" && s.mu.clusterID != id {
		return fmt.Errorf("%w: images in %s belong to cluster %q, the journal to %q", ErrClusterMismatch, s.dir, s.mu.clusterID, id)
	}
	s.mu.clusterID = id
	return nil
}

// checkClusterID checks an image's cluster id, adopting it while unknown.
func (s *Store) checkClusterID(name, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.clusterID == "" {
		s.mu.clusterID = id
		return nil
	}
	if id != s.mu.clusterID {
		return fmt.Errorf("%w: %s belongs to cluster %q, this node to %q", ErrClusterMismatch, name, id, s.mu.clusterID)
	}
	return nil
}

func (s *Store) acquire(ctx context.Context) error {
	select {
	case s.restoreSem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	s.mu.Lock()
	closed := s.mu.closed
	s.mu.Unlock()
	if closed {
		<-s.restoreSem
		return ErrClosed
	}
	return nil
}

func (s *Store) release() { <-s.restoreSem }

func imageName(index uint64) string { return imagePrefix + strconv.FormatUint(index, 10) }

func (s *Store) path(name string) string { return s.fs.PathJoin(s.dir, name) }

// parseName parses image.<index>[suffix]; ok is false for other names.
func parseName(name, suffix string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, imagePrefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, suffix)
	if !ok || rest == "" || len(rest) > 20 {
		return 0, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	if len(rest) > 1 && rest[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

type listing struct {
	installed, fetched, corrupt []uint64 // newest first
}

func (s *Store) list() (listing, error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return listing{}, operr.Errorf("image: list %s: %w", s.dir, err)
	}
	var l listing
	for _, n := range names {
		if i, ok := parseName(n, ""); ok {
			l.installed = append(l.installed, i)
		} else if i, ok := parseName(n, fetchedSuffix); ok {
			l.fetched = append(l.fetched, i)
		} else if i, ok := parseName(n, corruptSuffix); ok {
			l.corrupt = append(l.corrupt, i)
		}
	}
	desc := func(a, b uint64) int { return cmp.Compare(b, a) }
	slices.SortFunc(l.installed, desc)
	slices.SortFunc(l.fetched, desc)
	slices.SortFunc(l.corrupt, desc)
	return l, nil
}

// Indexes returns the indexes of the images present, newest first.
func (s *Store) Indexes() ([]uint64, error) {
	l, err := s.list()
	return l.installed, err
}

func (s *Store) removeTemps() error {
	removed := false
	for _, n := range []string{ckptTmpName, fetchTmpName} {
		if _, err := s.fs.Stat(s.path(n)); isNotExist(err) {
			continue
		}
		err := s.fs.Remove(s.path(n))
		switch {
		case err == nil:
			removed = true
			s.logger.Info("removed an unfinished image file left by a crash", "file", s.path(n))
		case !isNotExist(err):
			return operr.Errorf("image: remove %s: %w", s.path(n), err)
		}
	}
	if removed {
		return syncDir(s.fs, s.dir)
	}
	return nil
}

func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

// mkdirAllDurably creates dir and its missing parents durably
// (durable.MkdirAll).
func mkdirAllDurably(fs vfs.FS, dir string) error {
	if err := durable.MkdirAll(fs, dir); err != nil {
		return operr.Errorf("image: %w", err)
	}
	return nil
}

// syncDir fsyncs dir (durable.SyncDir).
func syncDir(fs vfs.FS, dir string) error {
	if err := durable.SyncDir(fs, dir); err != nil {
		return operr.Errorf("image: %w", err)
	}
	return nil
}

// Write writes an image with header h (ClusterID defaults to the Store's)
// and the body save produces: image.ckpt is written and fsynced, renamed to
// image.<index>, and the directory fsynced. Older images are not touched;
// see Prune.
func (s *Store) Write(ctx context.Context, h Header, save func(io.Writer) error) (Info, error) {
	if id := s.ClusterID(); h.ClusterID == "" {
		h.ClusterID = id
	} else if id != "" && h.ClusterID != id {
		return Info{}, fmt.Errorf("%w: writing an image of cluster %q into a store of cluster %q", ErrClusterMismatch, h.ClusterID, id)
	}
	s.mu.Lock()
	closed := s.mu.closed
	s.mu.Unlock()
	if closed {
		return Info{}, ErrClosed
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tmp := s.path(ckptTmpName)
	crc, n, err := s.writeFile(ctx, tmp, nil, func(w io.Writer) (uint32, int64, error) {
		return WriteTo(w, h, save)
	})
	if err != nil {
		return Info{}, err
	}
	name := imageName(h.Index)
	if err := s.renameDurably(tmp, s.path(name)); err != nil {
		return Info{}, err
	}
	h.Version = FormatVersion
	return Info{Header: h, Name: name, Size: n, CRC: crc}, nil
}

// writeFile creates path, fills it through fill and fsyncs it. On failure
// the partial file is removed (a crash leaves it for Open to remove).
// wrote, if not nil, hears how many bytes the file holds after each write
// to it (before the fsync).
func (s *Store) writeFile(ctx context.Context, path string, wrote func(int64), fill func(io.Writer) (uint32, int64, error)) (crc uint32, n int64, err error) {
	if err := s.Halted(); err != nil {
		return 0, 0, err
	}
	f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return 0, 0, operr.Errorf("image: create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			if rerr := s.fs.Remove(path); rerr != nil && !isNotExist(rerr) {
				s.logger.Warn("could not remove an unfinished image file", "file", path, "err", rerr)
			}
		}
	}()
	if f.Fd() != vfs.InvalidFd {
		// Start writing back behind the writer: the final fsync then
		// waits for the last few megabytes, not for the whole image, and
		// the disk works while the image is produced or received. The
		// success path syncs explicitly; a failed file is removed, so
		// closing it need not sync.
		f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: writeBehind, NoSyncOnClose: true})
	}
	var fw io.Writer = f
	if wrote != nil {
		fw = &progressWriter{w: f, wrote: wrote}
	}
	bw := bufio.NewWriterSize(fw, 1<<20)
	crc, n, err = fill(&ctxWriter{ctx: ctx, w: bw})
	if err != nil {
		return 0, 0, operr.Errorf("image: write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return 0, 0, operr.Errorf("image: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return 0, 0, s.halt(operr.Errorf("image: sync %s: %w", path, err))
	}
	if err := f.Close(); err != nil {
		return 0, 0, operr.Errorf("image: close %s: %w", path, err)
	}
	return crc, n, nil
}

func (s *Store) renameDurably(from, to string) error {
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	if err := s.Halted(); err != nil {
		return err
	}
	if err := s.fs.Rename(from, to); err != nil {
		return s.halt(operr.Errorf("image: rename %s to %s: %w", from, to, err))
	}
	if err := syncDir(s.fs, s.dir); err != nil {
		return s.halt(err)
	}
	return nil
}

// halt records cause as the reason the Store stops writing (the first one
// wins) and returns it marked with ErrHalted.
func (s *Store) halt(cause error) error {
	err := fmt.Errorf("%w: %w", ErrHalted, cause)
	if !s.halted.CompareAndSwap(nil, &err) {
		return err
	}
	s.logger.Error("image store halted: restart the node", "err", err)
	close(s.haltc)
	if s.cfg.OnHalt != nil {
		s.cfg.OnHalt(err)
	}
	return err
}

// Halted returns the storage failure that halted the Store (wrapping
// ErrHalted), or nil while it writes.
func (s *Store) Halted() error {
	if p := s.halted.Load(); p != nil {
		return *p
	}
	return nil
}

// Halting returns a channel that is closed once the Store halts; Halted
// then returns the cause. A journal whose Snapshots is the Store watches
// it and halts with the Store (journal.HaltSource), so a failed image fsync
// stops the node's writes with no OnHalt wiring, even one that failed
// before the journal opened.
func (s *Store) Halting() <-chan struct{} { return s.haltc }

// RequestImage asks the Store's running Checkpointer for an image now,
// without blocking; with no Checkpointer running it does nothing. The
// journal calls it (journal.ImageRequester) when raft must send a follower
// an image and the newest one predates that follower's membership: a node
// that joins after a compaction then gets an image without waiting for the
// next scheduled checkpoint.
func (s *Store) RequestImage() {
	if c := s.checkpointer.Load(); c != nil {
		c.requestImage()
	}
}

// progressWriter reports the bytes written through it so far.
type progressWriter struct {
	w     io.Writer
	n     int64
	wrote func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.wrote(p.n)
	return n, err
}

// ctxWriter stops a long write when its context ends (checked once per
// megabyte, not per call).
type ctxWriter struct {
	ctx     context.Context
	w       io.Writer
	pending int
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	c.pending += len(p)
	if c.pending >= yieldEvery {
		c.pending = 0
		if err := c.ctx.Err(); err != nil {
			return 0, context.Cause(c.ctx)
		}
		// A checkpoint is background work: let the goroutines waiting for
		// a CPU (the apply loop, readers) run now rather than at the next
		// preemption (a scheduler time slice away when every P is busy).
		runtime.Gosched()
	}
	return c.w.Write(p)
}

// yieldEvery is how many bytes an image is read or written between yields.
const yieldEvery = 256 << 10

// yieldReader yields the processor every yieldEvery bytes (see ctxWriter).
type yieldReader struct {
	r       io.Reader
	pending int
}

func (y *yieldReader) Read(p []byte) (int, error) {
	n, err := y.r.Read(p)
	y.pending += n
	if y.pending >= yieldEvery {
		y.pending = 0
		runtime.Gosched()
	}
	return n, err
}

// Retain tells Prune where the journal's log starts (after index, its
// FirstIndex - 1): the newest image at or below index stays, whatever
// Keep says, since the log can be replayed only from it, and so do the
// images after it, which the journal may compact up to next (with index 0,
// a log that starts at its first entry: every image). The checkpointer
// calls it after each image it records.
func (s *Store) Retain(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.logBase = index
	s.mu.retained = true
}

// Prune deletes all but the newest Keep images, the one Retain names and
// those after it, fetched images older than the newest image, and
// quarantined (corrupt) files older than the oldest of the newest Keep
// images. Images fetched and not yet installed are kept.
func (s *Store) Prune() error {
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	l, err := s.list()
	if err != nil {
		return err
	}
	s.mu.Lock()
	pinned := maps.Clone(s.mu.pinned)
	logBase, retained := s.mu.logBase, s.mu.retained
	s.mu.Unlock()
	var victims []string
	if len(l.installed) > s.cfg.Keep {
		// The newest image at or below logBase stays, and so does every
		// image after it: the journal compacts its log up to an image it
		// was told of, perhaps after this call, and the one its log then
		// starts after must be here: with a log that starts at its first
		// entry (logBase 0), every image. Without Retain, nothing beyond
		// the newest Keep is protected.
		base := !slices.ContainsFunc(l.installed[:s.cfg.Keep], func(i uint64) bool { return i <= logBase })
		for _, i := range l.installed[s.cfg.Keep:] {
			if retained && i > logBase {
				continue
			}
			if base && i <= logBase {
				base = false
				continue
			}
			if !pinned[i] {
				victims = append(victims, imageName(i))
			}
		}
	}
	if len(l.installed) > 0 {
		newest := l.installed[0]
		oldestKept := l.installed[min(len(l.installed), s.cfg.Keep)-1]
		for _, i := range l.fetched {
			if i <= newest && !pinned[i] {
				victims = append(victims, imageName(i)+fetchedSuffix)
			}
		}
		for _, i := range l.corrupt {
			if i < oldestKept {
				victims = append(victims, imageName(i)+corruptSuffix)
			}
		}
	}
	if len(victims) == 0 {
		return nil
	}
	return s.removeFiles(victims...)
}

// Verify reads the whole image at index and checks it. The error names the
// file and what is wrong.
func (s *Store) Verify(index uint64) (Info, error) {
	return s.verifyFile(imageName(index))
}

func (s *Store) verifyFile(name string) (Info, error) {
	return s.readFile(name, nil)
}

// openImage opens image file name and returns its path and size; a missing
// file is ErrNotFound.
func (s *Store) openImage(name string, opts ...vfs.OpenOption) (string, vfs.File, int64, error) {
	path := s.path(name)
	done := s.reading(name)
	f, err := s.fs.Open(path, opts...)
	if err != nil {
		done()
		if isNotExist(err) {
			return path, nil, 0, operr.Errorf("image: %s: %w", path, ErrNotFound)
		}
		return path, nil, 0, operr.Errorf("image: open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		done()
		return path, nil, 0, operr.Errorf("image: stat %s: %w", path, err)
	}
	return path, readingFile{f, done}, st.Size(), nil
}

// readingFile is an image file open for reading, registered as such until
// it is closed.
type readingFile struct {
	vfs.File
	done func()
}

func (f readingFile) Close() error {
	err := f.File.Close()
	f.done()
	return err
}

// readFile reads and checks the image file name, passing its body to body.
func (s *Store) readFile(name string, body func(io.Reader) error) (Info, error) {
	path, f, size, err := s.openImage(name, vfs.SequentialReadsOption)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	info, err := readImage(f, size, body)
	if err != nil {
		return Info{}, operr.Errorf("image: %s: %w", path, err)
	}
	info.Name = name
	return info, nil
}

// readHeader reads only the header of image name and its trailer checksum
// (no verification of the body).
func (s *Store) readHeader(name string) (Info, error) {
	path, f, size, err := s.openImage(name)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	h, raw, err := decodeHeader(bufio.NewReader(f))
	if err != nil {
		return Info{}, operr.Errorf("image: %s: %w", path, err)
	}
	if size < int64(len(raw))+trailerLen {
		return Info{}, operr.Errorf("image: %s: %w", path, corruptf("truncated: %d bytes", size))
	}
	var crc [4]byte
	if _, err := f.ReadAt(crc[:], size-4); err != nil {
		return Info{}, operr.Errorf("image: %s: %w", path, readErr("trailer", err))
	}
	return Info{Header: h, Name: name, Size: size, CRC: binary.BigEndian.Uint32(crc[:])}, nil
}

// Latest returns the header of the newest image (ErrNotFound if none). It
// does not read the body; Verify does.
func (s *Store) Latest() (Info, error) {
	l, err := s.list()
	if err != nil {
		return Info{}, err
	}
	if len(l.installed) == 0 {
		return Info{}, operr.Errorf("image: no image in %s: %w", s.dir, ErrNotFound)
	}
	return s.readHeader(imageName(l.installed[0]))
}

// loadInto loads image name into st. With verifyFirst the whole file is
// checked before st sees a byte (for a live state); without, a checksum
// failure is found after st.Load returned, so st must be one that is
// discarded or reloaded on error.
func (s *Store) loadInto(st State, name string, verifyFirst bool) (Info, error) {
	if verifyFirst {
		info, err := s.verifyFile(name)
		if err != nil {
			return Info{}, err
		}
		if err := s.checkClusterID(name, info.ClusterID); err != nil {
			return Info{}, err
		}
	} else {
		info, err := s.readHeader(name)
		if err != nil {
			return Info{}, err
		}
		if err := s.checkClusterID(name, info.ClusterID); err != nil {
			return Info{}, err
		}
	}
	info, err := s.readFile(name, func(r io.Reader) error {
		if err := st.Load(&yieldReader{r: r}); err != nil {
			if errors.Is(err, formatversion.ErrUnknown) {
				// Written by a newer binary: kept for one that reads it.
				return fmt.Errorf("%w: the state does not read the body's format: %w", ErrUnknownVersion, err)
			}
			return fmt.Errorf("%w: state rejected the body: %w", ErrCorrupt, err)
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	return info, nil
}

// quarantine renames a corrupt image out of the way so that it is neither
// served nor used as a checkpoint base, but kept for inspection.
func (s *Store) quarantine(name string, cause error) {
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	from, to := s.path(name), s.path(name+corruptSuffix)
	if err := s.fs.Rename(from, to); err != nil {
		s.logger.Warn("could not quarantine a corrupt image", "file", from, "err", err)
		return
	}
	if err := syncDir(s.fs, s.dir); err != nil {
		s.logger.Warn("could not sync the image dir", "err", err)
	}
	s.logger.Warn("quarantined a corrupt image", "file", from, "to", to, "err", cause)
}

// writeBehind is how far an image file's written bytes may run ahead of
// the write-back started behind them (sync_file_range on Linux).
const writeBehind = 4 << 20

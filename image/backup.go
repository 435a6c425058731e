package image

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/operr"
)

// BackupConfig configures Backup.
type BackupConfig struct {
	// Addr is the member to back up: host:port (plain HTTP) or a base URL
	// (https://host:port). Required.
	Addr string
	// Out is the file to write. Required; it is replaced atomically.
	Out string
	// FS is the filesystem Out is written to (default: vfs.Default).
	FS vfs.FS
	// HTTPClient sends the requests (default: a plain client; set one with
	// a TLS config for https).
	HTTPClient *http.Client
	// Token is the cluster's join token, which image requests carry (empty:
	// none).
	Token string
	// Header holds further request headers, such as the Authorization of
	// an API token layer in front of the member.
	Header http.Header
	// IdleTimeout aborts a download that receives nothing for this long
	// (default 30 s).
	IdleTimeout time.Duration
	// MaxImageBytes refuses larger images (default 1 TiB).
	MaxImageBytes int64
}

// Backup downloads the newest image the member at cfg.Addr has (it forces
// no checkpoint) and writes it to cfg.Out atomically: the stream goes to
// Out.tmp, is checked as a restore checks it (the trailer's CRC32C against
// the bytes received and the one the member announced, the header against
// the index asked for), is fsynced, renamed to Out, and the directory is
// fsynced. On any failure Out is left as it was and the temporary file is
// removed. The Info returned describes the file written.
func Backup(ctx context.Context, cfg BackupConfig) (Info, error) {
	if cfg.Addr == "" || cfg.Out == "" {
		return Info{}, errors.New("image: backup: Addr and Out are required")
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.MaxImageBytes == 0 {
		cfg.MaxImageBytes = 1 << 40
	}
	fs := cfg.FS
	// A Store over Out's directory, without the data dir's lock and
	// files: the client, the durable writer and the checks of Fetch.
	s := &Store{
		cfg:         Config{HTTPClient: cfg.HTTPClient, Token: cfg.Token, FetchIdleTimeout: cfg.IdleTimeout, MaxImageBytes: cfg.MaxImageBytes},
		fs:          fs,
		dir:         fs.PathDir(cfg.Out),
		logger:      slog.New(slog.DiscardHandler),
		extraHeader: cfg.Header,
	}
	ri, err := s.RemoteLatest(ctx, cfg.Addr)
	if err != nil {
		return Info{}, operr.Errorf("image: backup: %w", err)
	}
	resp, idle, err := s.get(ctx, cfg.Addr, PathPrefix+strconv.FormatUint(ri.Index, 10))
	if err != nil {
		return Info{}, operr.Errorf("image: backup: download image %d from %s: %w", ri.Index, cfg.Addr, err)
	}
	defer idle.stop()
	defer resp.Body.Close()
	wantCRC, err := s.checkResponse(resp, ri.Index)
	if err != nil {
		return Info{}, operr.Errorf("image: backup: %w", err)
	}
	tmp := cfg.Out + ".tmp"
	th, n, err := s.receive(ctx, resp, tmp, nil)
	if err == nil {
		if err = s.checkDownload(tmp, th, n, ri.Index, wantCRC); err != nil {
			err = operr.Errorf("image: backup: image %d from %s: %w", ri.Index, cfg.Addr, err)
			if rerr := fs.Remove(tmp); rerr != nil && !isNotExist(rerr) {
				err = errors.Join(err, operr.Errorf("image: remove %s: %w", tmp, rerr))
			}
		}
	}
	if err != nil {
		return Info{}, err
	}
	if err := s.renameDurably(tmp, cfg.Out); err != nil {
		return Info{}, operr.Errorf("image: backup: %w", err)
	}
	info, err := ReadHeader(fs, cfg.Out)
	if err != nil {
		return Info{}, operr.Errorf("image: backup: %w", err)
	}
	return info, nil
}

package image

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/internal/peerid"
)

// HTTP names shared by Handler and the fetch client.
const (
	headerClusterID = "X-Metatree-Cluster-Id"
	headerToken     = "X-Metatree-Token"
	headerIndex     = "X-Metatree-Image-Index"
	headerCRC       = "X-Metatree-Image-Crc32c"
	// PathPrefix is where a host mounts Handler; every path it serves
	// starts with it.
	PathPrefix = "/image/"
)

// RemoteInfo is the newest image a peer serves, as GET /image/latest
// reports it.
type RemoteInfo struct {
	ClusterID string `json:"cluster_id"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	Version   uint16 `json:"version"`
	Size      int64  `json:"size"`
	CRC       uint32 `json:"crc32c"`
}

// Handler serves this node's images to peers; mount it under PathPrefix:
//
//	GET /image/latest    the newest image's metadata (JSON RemoteInfo)
//	GET /image/<index>   the image file, streamed, with its CRC32C in the
//	                     X-Metatree-Image-Crc32c header
//
// A request must carry the join token (X-Metatree-Token) when the Store has
// one (compared in constant time), a verified client certificate when the
// Store has a TLS configuration, and a cluster id (X-Metatree-Cluster-Id), when it carries one, must
// be this node's: a joining node that does not know the cluster id yet
// learns it from the image header.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /image/latest", s.serveLatest)
	mux.HandleFunc("GET /image/{index}", s.serveImage)
	return mux
}

func (s *Store) checkRequest(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(headerToken)), []byte(s.cfg.Token)) != 1 {
		http.Error(w, "image: wrong or missing join token", http.StatusForbidden)
		return false
	}
	if s.cfg.TLS != nil && !peerid.Verified(r.TLS) {
		http.Error(w, "image: a member certificate from the cluster's CA is required", http.StatusForbidden)
		return false
	}
	if id := r.Header.Get(headerClusterID); id != "" {
		if own := s.ClusterID(); own != "" && id != own {
			http.Error(w, fmt.Sprintf("image: cluster id mismatch: request is for %q, this node is in %q", id, own), http.StatusConflict)
			return false
		}
	}
	return true
}

func (s *Store) serveLatest(w http.ResponseWriter, r *http.Request) {
	if !s.checkRequest(w, r) {
		return
	}
	info, err := s.Latest()
	if err != nil {
		s.serveErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(RemoteInfo{
		ClusterID: info.ClusterID, Index: info.Index, Term: info.Term,
		Version: info.Version, Size: info.Size, CRC: info.CRC,
	})
}

func (s *Store) serveImage(w http.ResponseWriter, r *http.Request) {
	if !s.checkRequest(w, r) {
		return
	}
	index, err := strconv.ParseUint(r.PathValue("index"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("image: bad index %q", r.PathValue("index")), http.StatusBadRequest)
		return
	}
	name := imageName(index)
	// Open once and serve from this handle, registered as a reader: a
	// prune meanwhile removes the file without truncating it, which does
	// not cut the stream.
	defer s.reading(name)()
	f, err := s.fs.Open(s.path(name), vfs.SequentialReadsOption)
	if err != nil {
		if isNotExist(err) {
			err = operr.Errorf("image: no %s here: %w", name, ErrNotFound)
		}
		s.serveErr(w, err)
		return
	}
	defer f.Close()
	info, err := s.readHeader(name)
	if err != nil {
		s.serveErr(w, err)
		return
	}
	st, err := f.Stat()
	if err != nil || st.Size() != info.Size {
		s.serveErr(w, fmt.Errorf("image: %s changed while opening it", name))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set(headerIndex, strconv.FormatUint(index, 10))
	w.Header().Set(headerCRC, fmt.Sprintf("%08x", info.CRC))
	// A LimitedReader over the file itself (not a SectionReader): net/http
	// then hands an *os.File-backed file to sendfile(2), and the image
	// goes from the page cache to the socket without a copy through here.
	if n, err := io.Copy(w, io.LimitReader(f, info.Size)); err != nil {
		s.logger.Warn("serving an image failed", "image", name, "sent", n, "err", err)
	}
}

func (s *Store) serveErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrUnknownVersion):
		s.logger.Error("refusing to serve a bad image", "err", err)
	}
	http.Error(w, err.Error(), code)
}

package image

import (
	"context"
	"fmt"
	"io"
)

// Rewrite writes an image with header h (ClusterID defaults to the
// Store's) and the body of the image file src (a path on the Store's
// filesystem) into the Store. src is checked whole while it is copied into
// image.ckpt, and only a source that checks out gets renamed to
// image.<index> (directory fsynced): a corrupt one fails the call
// (ErrCorrupt, naming src) and leaves no image. It is how a restore gives a
// backup a new cluster's header without decoding the catalog it holds.
func (s *Store) Rewrite(ctx context.Context, src string, h Header) (Info, error) {
	if id := s.ClusterID(); h.ClusterID == "" {
		h.ClusterID = id
	} else if id != "" && h.ClusterID != id {
		return Info{}, fmt.Errorf("%w: writing an image of cluster %q into a store of cluster %q", ErrClusterMismatch, h.ClusterID, id)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tmp := s.path(ckptTmpName)
	var crc uint32
	var n int64
	_, err := ReadFile(s.fs, src, func(body io.Reader) error {
		var werr error
		crc, n, werr = s.writeFile(ctx, tmp, nil, func(w io.Writer) (uint32, int64, error) {
			return WriteTo(w, h, func(w io.Writer) error {
				_, err := io.Copy(w, body)
				return err
			})
		})
		return werr
	})
	if err != nil {
		if rerr := s.fs.Remove(tmp); rerr != nil && !isNotExist(rerr) {
			s.logger.Warn("could not remove an unfinished image file", "file", tmp, "err", rerr)
		}
		return Info{}, err
	}
	name := imageName(h.Index)
	if err := s.renameDurably(tmp, s.path(name)); err != nil {
		return Info{}, err
	}
	h.Version = FormatVersion
	return Info{Header: h, Name: name, Size: n, CRC: crc}, nil
}

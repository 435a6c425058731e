package image

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/operr"
)

// ReadFile reads the image file at path and checks it whole: header,
// trailer and the CRC32C over everything. body, if not nil, is given the
// body as a stream while it is read; a checksum failure is reported after
// body returns, so body must only fill what is discarded on error. The
// error names the file and what is wrong (ErrCorrupt, ErrUnknownVersion).
// It reads nothing else and takes no lock: an image file never changes
// once it has its name, so a running node's images can be read. fs nil is
// vfs.Default.
func ReadFile(fs vfs.FS, path string, body func(io.Reader) error) (Info, error) {
	if fs == nil {
		fs = vfs.Default
	}
	f, size, err := openFile(fs, path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	info, err := readImage(f, size, body)
	if err != nil {
		return Info{}, operr.Errorf("image: %s: %w", path, err)
	}
	info.Name = fs.PathBase(path)
	return info, nil
}

// ReadHeader reads the header of the image file at path and the checksum
// its trailer stores, without reading the body (ReadFile verifies it).
func ReadHeader(fs vfs.FS, path string) (Info, error) {
	if fs == nil {
		fs = vfs.Default
	}
	f, size, err := openFile(fs, path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	h, raw, err := decodeHeader(bufio.NewReader(io.NewSectionReader(f, 0, size)))
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
	return Info{Header: h, Name: fs.PathBase(path), Size: size, CRC: binary.BigEndian.Uint32(crc[:])}, nil
}

func openFile(fs vfs.FS, path string) (vfs.File, int64, error) {
	f, err := fs.Open(path, vfs.SequentialReadsOption)
	if err != nil {
		if isNotExist(err) {
			return nil, 0, operr.Errorf("image: %s: %w", path, ErrNotFound)
		}
		return nil, 0, operr.Errorf("image: open %s: %w", path, err)
	}
	// Registered as a reader, across processes: the node's shredder (a
	// running Store pruning this image) does not truncate a file locked
	// so, and holds its own lock while it does (see tryFlock).
	removing := func() (vfs.File, int64, error) {
		f.Close()
		return nil, 0, fmt.Errorf("image: %s: %w: the node is removing it (an old image being pruned)", path, ErrNotFound)
	}
	locked := f.Fd() != vfs.InvalidFd
	if locked && tryFlock(f.Fd(), false) {
		return removing()
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, operr.Errorf("image: stat %s: %w", path, err)
	}
	if st.IsDir() {
		f.Close()
		return nil, 0, fmt.Errorf("image: %s is a directory, not an image file", path)
	}
	// The shredder renames a file before it truncates it and removes it
	// before it unlocks it: a file opened before that and locked after
	// is no longer under path.
	if locked {
		if cur, err := fs.Stat(path); err != nil || !sameFile(st, cur) {
			return removing()
		}
	}
	return f, st.Size(), nil
}

// DirListing is what a data dir's image directory holds, by file name.
type DirListing struct {
	// Dir is the image directory (the data dir's image/).
	Dir string
	// Images are the indexes of the image.<index> files, newest first.
	Images []uint64
	// Fetched are images downloaded from a peer that raft has not taken
	// yet (image.<index>.fetched), newest first.
	Fetched []uint64
	// Corrupt are images set aside by a startup that could not load them
	// (image.<index>.corrupt), newest first.
	Corrupt []uint64
	// Temps are the unfinished files a crash can leave (image.ckpt,
	// image.fetch); Open removes them.
	Temps []string
}

// ListDir lists the image directory of the data dir dataDir without
// changing it (no temporary file is removed, no lock is taken). A data dir
// without an image directory has an empty listing.
func ListDir(fs vfs.FS, dataDir string) (DirListing, error) {
	if fs == nil {
		fs = vfs.Default
	}
	dir := fs.PathJoin(dataDir, imageDirName)
	out := DirListing{Dir: dir}
	if _, err := fs.Stat(dir); isNotExist(err) {
		return out, nil
	}
	s := &Store{fs: fs, dir: dir}
	l, err := s.list()
	if err != nil {
		return DirListing{}, err
	}
	out.Images, out.Fetched, out.Corrupt = l.installed, l.fetched, l.corrupt
	for _, n := range []string{ckptTmpName, fetchTmpName} {
		if _, err := fs.Stat(fs.PathJoin(dir, n)); err == nil {
			out.Temps = append(out.Temps, n)
		}
	}
	slices.Sort(out.Temps)
	return out, nil
}

// Path returns the path of image index in the listing's directory.
func (l DirListing) Path(fs vfs.FS, index uint64) string {
	if fs == nil {
		fs = vfs.Default
	}
	return fs.PathJoin(l.Dir, imageName(index))
}

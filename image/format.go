package image

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/metatree/metatree/internal/operr"
)

// FormatVersion is the image format version this build writes. Readers
// reject any other version with ErrUnknownVersion.
const FormatVersion = 1

var (
	fileMagic  = [8]byte{'M', 'T', 'I', 'M', 'A', 'G', 'E', 0}
	endMagic   = [8]byte{'M', 'T', 'I', 'M', 'G', 'E', 'N', 'D'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

const (
	// fixedHeaderLen is the part of the header every format version shares:
	// magic, version (u16), flags (u16), length of the rest (u32). The rest
	// is followed by a CRC32C of the whole header, so a flipped bit in the
	// version reads as corruption, not as an unknown version.
	fixedHeaderLen = 16
	headerCRCLen   = 4
	// trailerLen: body length (u64), end magic, CRC32C (u32).
	trailerLen = 20

	maxVarHeaderLen  = 64 << 20
	maxClusterIDLen  = 1024
	maxMembershipLen = 32 << 20
)

// Header is what an image says about itself.
type Header struct {
	// Version is the format version the image was written in.
	Version uint16
	// ClusterID is the cluster the image belongs to.
	ClusterID string
	// Index and Term are the raft index and term of the last entry the image
	// contains.
	Index, Term uint64
	// Membership is the journal's opaque membership blob (raft ConfState and
	// peer addresses) as of Index.
	Membership []byte
}

// Info describes one image file.
type Info struct {
	Header
	// Name is the file name inside the image directory (image.<index>).
	Name string
	// Size is the file size in bytes.
	Size int64
	// CRC is the CRC32C over the whole file before the checksum itself, as
	// stored in the trailer.
	CRC uint32
}

func newCRC() hash.Hash32 { return crc32.New(castagnoli) }

// encodeHeader returns the header bytes of an image with h's fields
// (h.Version is ignored: FormatVersion is written).
func encodeHeader(h Header) ([]byte, error) {
	if len(h.ClusterID) > maxClusterIDLen {
		return nil, fmt.Errorf("image: cluster id is %d bytes, limit %d", len(h.ClusterID), maxClusterIDLen)
	}
	if len(h.Membership) > maxMembershipLen {
		return nil, fmt.Errorf("image: membership blob is %d bytes, limit %d", len(h.Membership), maxMembershipLen)
	}
	var rest []byte
	rest = binary.AppendUvarint(rest, uint64(len(h.ClusterID)))
	rest = append(rest, h.ClusterID...)
	rest = binary.BigEndian.AppendUint64(rest, h.Index)
	rest = binary.BigEndian.AppendUint64(rest, h.Term)
	rest = binary.AppendUvarint(rest, uint64(len(h.Membership)))
	rest = append(rest, h.Membership...)

	buf := make([]byte, 0, fixedHeaderLen+len(rest)+headerCRCLen)
	buf = append(buf, fileMagic[:]...)
	buf = binary.BigEndian.AppendUint16(buf, FormatVersion)
	buf = binary.BigEndian.AppendUint16(buf, 0) // flags: none defined
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(rest)))
	buf = append(buf, rest...)
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	return buf, nil
}

// encodeTrailer returns the trailer for a body of bodyLen bytes, given the
// running checksum of the header and body. It adds the trailer's own
// covered bytes to sum.
func encodeTrailer(sum hash.Hash32, bodyLen uint64) []byte {
	buf := make([]byte, 0, trailerLen)
	buf = binary.BigEndian.AppendUint64(buf, bodyLen)
	buf = append(buf, endMagic[:]...)
	sum.Write(buf)
	return binary.BigEndian.AppendUint32(buf, sum.Sum32())
}

// decodeHeader reads and checks an image header from r. It returns the
// header and its raw bytes (which the whole-file checksum covers).
func decodeHeader(r io.Reader) (Header, []byte, error) {
	fixed := make([]byte, fixedHeaderLen)
	if _, err := io.ReadFull(r, fixed); err != nil {
		return Header{}, nil, readErr("header", err)
	}
	if [8]byte(fixed[:8]) != fileMagic {
		return Header{}, nil, corruptf("bad magic %q: not an image file", fixed[:8])
	}
	version := binary.BigEndian.Uint16(fixed[8:10])
	restLen := binary.BigEndian.Uint32(fixed[12:16])
	if restLen > maxVarHeaderLen {
		return Header{}, nil, corruptf("header length %d exceeds limit %d", restLen, maxVarHeaderLen)
	}
	// The rest is read as it arrives, so that what is allocated follows
	// the bytes there are, not the length the prefix claims.
	need := int64(restLen) + headerCRCLen
	buf := bytes.NewBuffer(make([]byte, 0, fixedHeaderLen+min(need, 64<<10)))
	buf.Write(fixed)
	if n, err := buf.ReadFrom(io.LimitReader(r, need)); err != nil {
		return Header{}, nil, readErr("header", err)
	} else if n < need {
		return Header{}, nil, readErr("header", io.ErrUnexpectedEOF)
	}
	raw := buf.Bytes()
	end := fixedHeaderLen + int(restLen)
	if got, want := crc32.Checksum(raw[:end], castagnoli), binary.BigEndian.Uint32(raw[end:]); got != want {
		return Header{}, nil, corruptf("header checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	if version != FormatVersion {
		return Header{}, nil, fmt.Errorf("%w: format version %d (this build reads %d)", ErrUnknownVersion, version, FormatVersion)
	}
	if flags := binary.BigEndian.Uint16(fixed[10:12]); flags != 0 {
		return Header{}, nil, fmt.Errorf("%w: unknown header flags %#04x", ErrUnknownVersion, flags)
	}
	h := Header{Version: version}
	rest := raw[fixedHeaderLen:end]
	id, rest, err := readBytes(rest, maxClusterIDLen, "cluster id")
	if err != nil {
		return Header{}, nil, err
	}
	h.ClusterID = string(id)
	if len(rest) < 16 {
		return Header{}, nil, corruptf("header too short for index and term")
	}
	h.Index = binary.BigEndian.Uint64(rest)
	h.Term = binary.BigEndian.Uint64(rest[8:])
	rest = rest[16:]
	m, rest, err := readBytes(rest, maxMembershipLen, "membership")
	if err != nil {
		return Header{}, nil, err
	}
	if len(m) > 0 {
		h.Membership = append([]byte(nil), m...)
	}
	if len(rest) != 0 {
		return Header{}, nil, corruptf("%d unexpected bytes at the end of the header", len(rest))
	}
	return h, raw, nil
}

func readBytes(b []byte, limit int, what string) (val, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, corruptf("bad %s length", what)
	}
	if n > uint64(limit) || n > uint64(len(b)-k) {
		return nil, nil, corruptf("%s length %d exceeds the header (or limit %d)", what, n, limit)
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// decodeTrailer checks a trailer against the running checksum of the bytes
// before it and the body length actually present.
func decodeTrailer(t []byte, sum hash.Hash32, bodyLen uint64) (uint32, error) {
	if len(t) != trailerLen {
		return 0, corruptf("truncated: trailer is %d bytes, want %d", len(t), trailerLen)
	}
	if [8]byte(t[8:16]) != endMagic {
		return 0, corruptf("bad trailer magic %q (truncated or overwritten file)", t[8:16])
	}
	if stored := binary.BigEndian.Uint64(t[:8]); stored != bodyLen {
		return 0, corruptf("body length mismatch: trailer says %d, file holds %d (truncated or extended file)", stored, bodyLen)
	}
	sum.Write(t[:16])
	got, want := sum.Sum32(), binary.BigEndian.Uint32(t[16:])
	if got != want {
		return 0, corruptf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	return want, nil
}

func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptf("truncated %s", what)
	}
	return operr.Errorf("image: read %s: %w", what, err)
}

// readImage reads a whole image of size bytes from r, checking header,
// trailer and checksum. body, if not nil, is given the body as a stream; it
// need not read all of it. Checksum failures are reported after body
// returns, so body must only fill state that is discarded on error.
func readImage(r io.Reader, size int64, body func(io.Reader) error) (Info, error) {
	sum := newCRC()
	cr := &countingReader{r: r}
	br := bufio.NewReaderSize(cr, 256<<10)
	h, raw, err := decodeHeader(br)
	if err != nil {
		return Info{}, err
	}
	sum.Write(raw)
	bodyLen := size - int64(len(raw)) - trailerLen
	if bodyLen < 0 {
		return Info{}, corruptf("truncated: %d bytes is too short for header and trailer", size)
	}
	lr := &io.LimitedReader{R: br, N: bodyLen}
	tee := io.TeeReader(lr, sum)
	if body != nil {
		if err := body(tee); err != nil {
			// A checksum failure explains a body that does not parse.
			if _, cerr := io.Copy(io.Discard, tee); cerr == nil {
				t := make([]byte, trailerLen)
				if _, terr := io.ReadFull(br, t); terr == nil {
					if _, terr := decodeTrailer(t, sum, uint64(bodyLen)); terr != nil {
						return Info{}, terr
					}
				}
			}
			return Info{}, err
		}
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return Info{}, readErr("body", err)
	}
	if lr.N != 0 {
		return Info{}, corruptf("truncated body")
	}
	t := make([]byte, trailerLen)
	if _, err := io.ReadFull(br, t); err != nil {
		return Info{}, readErr("trailer", err)
	}
	crc, err := decodeTrailer(t, sum, uint64(bodyLen))
	if err != nil {
		return Info{}, err
	}
	if extra, _ := br.Read(make([]byte, 1)); extra != 0 {
		return Info{}, corruptf("data after the trailer")
	}
	return Info{Header: h, Size: size, CRC: crc}, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// WriteTo writes a whole image with header h and the body produced by save
// to w, and returns the trailer checksum and the number of bytes written.
// It is the encoder behind Store.Write, exposed for tools and tests.
func WriteTo(w io.Writer, h Header, save func(io.Writer) error) (crc uint32, n int64, err error) {
	hdr, err := encodeHeader(h)
	if err != nil {
		return 0, 0, err
	}
	sum := newCRC()
	// The checksum sees each buffer first: a vfs.File may modify what it
	// is given to write.
	cw := &countingWriter{w: io.MultiWriter(sum, w)}
	if _, err := cw.Write(hdr); err != nil {
		return 0, cw.n, err
	}
	start := cw.n
	if err := save(cw); err != nil {
		return 0, cw.n, operr.Errorf("image: save body: %w", err)
	}
	t := encodeTrailer(sum, uint64(cw.n-start))
	crc = binary.BigEndian.Uint32(t[16:])
	if _, err := w.Write(t); err != nil {
		return 0, cw.n, err
	}
	return crc, cw.n + trailerLen, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

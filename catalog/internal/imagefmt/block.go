package imagefmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/metatree/metatree/internal/operr"
)

const (
	// Magic starts every body, and the version byte follows it.
	Magic   = "MTCATIMG"
	Version = 2 // the newest read and written
	V1      = 1 // no ownerships
	// BlockBytes is about how much a writer puts in a block of records or
	// links before it starts the next.
	BlockBytes = 64 << 10
	// MaxBlockBytes is the longest block payload the reader takes.
	MaxBlockBytes = 8 << 20
)

// The block types, the first byte of a payload.
const (
	BlockHeader = 'H'
	BlockNodes  = 'N'
	BlockLinks  = 'O'
	BlockEnd    = 'E'
)

// ErrCorrupt: an image body is truncated, fails its checksum, or holds
// inconsistent content. Package catalog exports it as its own ErrCorrupt.
var ErrCorrupt = errors.New("catalog: corrupt image")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BlockWriter frames payloads as blocks on w. The caller appends a block's
// payload to Payload and calls Flush.
type BlockWriter struct {
	w       io.Writer
	out     []byte
	Payload []byte
	Blocks  int // blocks written
}

// NewBlockWriter returns a BlockWriter on w with room for a block's
// payload.
func NewBlockWriter(w io.Writer) *BlockWriter {
	return &BlockWriter{w: w, Payload: make([]byte, 0, BlockBytes+4096)}
}

// WriteHead writes the magic and the version that start a body.
func WriteHead(w io.Writer, version byte) error {
	if _, err := io.WriteString(w, Magic+string([]byte{version})); err != nil {
		return operr.Errorf("catalog: save: %w", err)
	}
	return nil
}

// Flush writes Payload as one block, if it holds anything, and empties it.
func (bw *BlockWriter) Flush() error {
	if len(bw.Payload) == 0 {
		return nil
	}
	bw.out = binary.AppendUvarint(bw.out[:0], uint64(len(bw.Payload)))
	crc := crc32.Update(crc32.Checksum(bw.out, castagnoli), castagnoli, bw.Payload)
	bw.out = append(bw.out, bw.Payload...)
	bw.out = binary.LittleEndian.AppendUint32(bw.out, crc)
	bw.Payload = bw.Payload[:0]
	bw.Blocks++
	if _, err := bw.w.Write(bw.out); err != nil {
		return operr.Errorf("catalog: save: %w", err)
	}
	return nil
}

// BlockReader reads the blocks that follow a body's magic and version.
type BlockReader struct {
	r      io.Reader
	off    int64 // bytes consumed, from where the reader started
	blocks int
	buf    []byte
	verify bool
}

// NewBlockReader returns a BlockReader on r; verify=false skips the
// checksums (for fuzzing the decoding behind them).
func NewBlockReader(r io.Reader, verify bool) *BlockReader {
	return &BlockReader{r: r, verify: verify}
}

// Pos returns how many blocks were read and the byte offset after them,
// for errors.
func (br *BlockReader) Pos() (blocks int, off int64) { return br.blocks, br.off }

// Corrupt returns ErrCorrupt with the reader's position and the detail.
func (br *BlockReader) Corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: block %d (byte %d): %s", ErrCorrupt, br.blocks, br.off, fmt.Sprintf(format, args...))
}

func (br *BlockReader) readFull(b []byte, what string) error {
	n, err := io.ReadFull(br.r, b)
	br.off += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return br.Corrupt("truncated in %s", what)
	}
	if err != nil {
		return operr.Errorf("catalog: load: block %d (byte %d): %w", br.blocks, br.off, err)
	}
	return nil
}

// Next reads one block and returns its payload (valid until the next call).
func (br *BlockReader) Next() ([]byte, error) {
	var lenBytes [binary.MaxVarintLen64]byte
	n := 0
	for {
		if n == len(lenBytes) {
			return nil, br.Corrupt("bad block length")
		}
		if err := br.readFull(lenBytes[n:n+1], "block length"); err != nil {
			return nil, err
		}
		n++
		if lenBytes[n-1] < 0x80 {
			break
		}
	}
	l, m := binary.Uvarint(lenBytes[:n])
	if m <= 0 || l == 0 || l > MaxBlockBytes {
		return nil, br.Corrupt("block length %d out of range", l)
	}
	// The payload is read as it arrives, the buffer growing with it, so
	// that what is allocated follows the bytes there are, not the length
	// the block claims.
	need := int(l) + 4
	b := br.buf[:0]
	for len(b) < need {
		step := min(need, max(2*len(b), 64<<10))
		b = slices.Grow(b, step-len(b))
		if err := br.readFull(b[len(b):step], "block payload"); err != nil {
			return nil, err
		}
		b = b[:step]
	}
	br.buf = b
	payload := b[:l]
	want := binary.LittleEndian.Uint32(b[l:])
	if br.verify {
		got := crc32.Update(crc32.Checksum(lenBytes[:n], castagnoli), castagnoli, payload)
		if got != want {
			return nil, br.Corrupt("checksum mismatch (got %08x, want %08x)", got, want)
		}
	}
	br.blocks++
	return payload, nil
}

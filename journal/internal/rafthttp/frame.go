package rafthttp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/errs"
)

// Framing of the raft message stream: length-prefixed batches of encoded
// messages, written by the sending side and read, bounded, by the serving
// side.

// StreamBatchBytes is how much a stream frame coalesces from the queue
// before it is written: a frame is at most this plus one message.
const StreamBatchBytes = 1 << 20

// FrameSlack covers a frame's and a message's framing and the envelope
// around an entry's data.
const FrameSlack = 64 << 10

// streamBody is a stream's request body: the first frame, then, once the
// peer accepted the stream, batches of whatever the peer's queue holds. It
// ends when ctx does (the stream failed or the peer was removed).
type streamBody struct {
	p        *sender
	ctx      context.Context
	accepted chan struct{} // closed when the peer answered 200
	pending  []byte        // encoded, not yet written (Read's leftovers)
	batch    [][]byte
	buf      []byte // the frame being written (reused: writes are synchronous)
}

// next blocks for the next frame: the pending one, or a batch coalesced
// from the queue (after the peer accepted the stream).
func (b *streamBody) next() ([]byte, error) {
	if len(b.pending) > 0 {
		f := b.pending
		b.pending = nil
		return f, nil
	}
	select {
	case <-b.accepted:
	case <-b.ctx.Done():
		return nil, b.ctx.Err()
	}
	var size int
	select {
	case <-b.ctx.Done():
		return nil, b.ctx.Err()
	case <-b.p.stop:
		return nil, io.EOF
	case m := <-b.p.q:
		b.p.dequeued(m)
		b.batch = append(b.batch[:0], m)
		size = len(m)
	case <-b.p.drain:
		if b.p.drained() {
			return nil, io.EOF // removed, and all queued was written
		}
		m := <-b.p.q // only this goroutine takes from q
		b.p.dequeued(m)
		b.batch = append(b.batch[:0], m)
		size = len(m)
	}
	// Coalesce whatever else is queued into this frame.
	for size < StreamBatchBytes {
		select {
		case m := <-b.p.q:
			b.p.dequeued(m)
			b.batch = append(b.batch, m)
			size += len(m)
			continue
		default:
		}
		break
	}
	b.buf = AppendFrame(b.buf[:0], b.batch)
	clear(b.batch)
	return b.buf, nil
}

// WriteTo writes frames to w until the stream ends; net/http's copy of
// the body calls it.
func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		f, err := b.next()
		if err != nil {
			return n, err
		}
		k, err := w.Write(f)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}

// Read serves readers that do not use WriteTo (a wrapping RoundTripper).
func (b *streamBody) Read(buf []byte) (int, error) {
	if len(b.pending) == 0 {
		f, err := b.next()
		if err != nil {
			return 0, err
		}
		b.pending = f
	}
	n := copy(buf, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *streamBody) Close() error { return nil }

// AppendFrame appends the frame of the encoded messages msgs to buf. A
// frame is a 4-byte big-endian length N, then N bytes of (uvarint length,
// protobuf raftpb.Message) repeated.
func AppendFrame(buf []byte, msgs [][]byte) []byte {
	n := 0
	for _, m := range msgs {
		n += binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(m))) + len(m)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	for _, m := range msgs {
		buf = binary.AppendUvarint(buf, uint64(len(m)))
		buf = append(buf, m...)
	}
	return buf
}

// readFrame reads one frame; io.EOF at a frame boundary ends a stream.
func readFrame(r io.Reader, max int64, scratch []byte) ([]*raftpb.Message, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, scratch, fmt.Errorf("%w: truncated frame header", errs.ErrMalformed)
		}
		return nil, scratch, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if n > max {
		return nil, scratch, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", errTooLarge, n, max)
	}
	if int64(cap(scratch)) < n {
		scratch = make([]byte, n)
	}
	scratch = scratch[:n]
	if _, err := io.ReadFull(r, scratch); err != nil {
		return nil, scratch, fmt.Errorf("%w: truncated frame (%d bytes announced): %w", errs.ErrMalformed, n, err)
	}
	msgs, err := decodeFrameBody(scratch)
	return msgs, scratch, err
}

var errTooLarge = fmt.Errorf("%w: too large", errs.ErrMalformed)

// decodeFrameBody decodes the messages of one frame.
func decodeFrameBody(b []byte) ([]*raftpb.Message, error) {
	var msgs []*raftpb.Message
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: bad message length in frame", errs.ErrMalformed)
		}
		m, err := decodeMessage(b[n : n+int(l)])
		if err != nil {
			return nil, fmt.Errorf("%w: raft message: %w", errs.ErrMalformed, err)
		}
		if m.Type == nil || m.To == nil || m.From == nil {
			return nil, fmt.Errorf("%w: raft message without type, from or to", errs.ErrMalformed)
		}
		if _, ok := raftpb.MessageType_name[int32(m.GetType())]; !ok {
			return nil, fmt.Errorf("%w: unknown raft message type %d", errs.ErrMalformed, m.GetType())
		}
		msgs = append(msgs, m)
		b = b[n+int(l):]
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: empty frame", errs.ErrMalformed)
	}
	return msgs, nil
}

package rafthttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/errs"
)

// The sending side of the HTTP transport: one streaming sender a peer,
// snapshots on a request of their own, and the forward and join calls.

// Send encodes each message now (raft may reuse
// its memory) and queues it for its peer's sender.
func (t *Transport) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		p := t.peer(to)
		if p == nil || t.dropped(t.local, to) {
			if m.GetType() == raftpb.MsgSnap {
				// Not from here: Send runs on the raft loop, which is the
				// one that drains the reports ReportSnapshot waits on.
				t.wg.Go(func() { t.recv.ReportSnapshot(to, false) })
			} else {
				t.recv.ReportUnreachable(to)
			}
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.log.Error("encode raft message", "to", to, "err", err)
			continue
		}
		if m.GetType() == raftpb.MsgSnap {
			t.wg.Go(func() { t.sendSnapshot(p, b) })
			continue
		}
		if !p.enqueue(b) {
			t.recv.ReportUnreachable(to)
		}
	}
}

func (t *Transport) newRequest(ctx context.Context, addr, path string, to uint64, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.opts.Scheme+"://"+addr+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set(HeaderCluster, t.id.ClusterID())
	req.Header.Set(HeaderToken, t.id.Token)
	req.Header.Set(HeaderFrom, strconv.FormatUint(t.local, 10))
	if to != 0 {
		req.Header.Set(HeaderTo, strconv.FormatUint(to, 10))
	}
	if t.id.Addr != "" {
		req.Header.Set(HeaderAddr, t.id.Addr)
	}
	return req, nil
}

func (t *Transport) sendSnapshot(p *sender, msg []byte) {
	ok := false
	defer func() { t.recv.ReportSnapshot(p.id, ok) }()
	frame := AppendFrame(nil, [][]byte{msg})
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.SnapshotTimeout)
	defer cancel()
	req, err := t.newRequest(ctx, *p.addr.Load(), PathSnapshot, p.id, bytes.NewReader(frame))
	if err != nil {
		t.log.Error("snapshot request", "to", p.id, "err", err)
		return
	}
	resp, err := t.client.Do(req)
	if err != nil {
		t.log.Warn("send snapshot", "to", p.id, "err", err)
		return
	}
	defer resp.Body.Close()
	if err := decodeErrorResponse(resp); err != nil {
		t.log.Warn("snapshot refused", "to", p.id, "err", err)
		return
	}
	ok = true
}

// Forward sends proposal fr to node to and decodes its JSON answer into
// out. A refusal comes back as the sentinel the peer answered with, a
// failure to reach the peer wrapped in ErrUnreachable.
func (t *Transport) Forward(ctx context.Context, to uint64, fr Proposal, out any) error {
	p := t.peer(to)
	if p == nil || t.dropped(t.local, to) {
		return fmt.Errorf("%w: node %d", errs.ErrUnreachable, to)
	}
	body := make([]byte, 0, 18+len(fr.Data))
	force := byte(0)
	if fr.Force {
		force = 1
	}
	body = append(body, byte(fr.Kind), force)
	body = append(body, fr.Key[:]...)
	body = append(body, fr.Data...)
	req, err := t.newRequest(ctx, *p.addr.Load(), PathPropose, to, bytes.NewReader(body))
	if err != nil {
		return err
	}
	return t.do(req, out)
}

// Join sends the join request jr, encoded as JSON, to the member at
// address helper with token in place of the transport's own, and decodes
// its JSON answer into out, with the error rules of Forward.
func (t *Transport) Join(ctx context.Context, helper, token string, jr, out any) error {
	b, err := json.Marshal(jr)
	if err != nil {
		return err
	}
	req, err := t.newRequest(ctx, helper, PathJoin, 0, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set(HeaderToken, token)
	return t.do(req, out)
}

// do sends a request and decodes a JSON answer or a typed error.
func (t *Transport) do(req *http.Request, out any) error {
	resp, err := t.client.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return fmt.Errorf("%w: %w", errs.ErrUnreachable, context.Cause(req.Context()))
		}
		return fmt.Errorf("%w: %w", errs.ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if err := decodeErrorResponse(resp); err != nil {
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, t.opts.MaxBodyBytes)).Decode(out); err != nil {
		return fmt.Errorf("%w: response from %s: %w", errs.ErrMalformed, req.URL.Host, err)
	}
	return nil
}

// sender is the sender side of one peer: a bounded queue and one
// goroutine that keeps a stream open and writes batches onto it.
type sender struct {
	t      *Transport
	id     uint64
	addr   atomic.Pointer[string]
	q      chan []byte
	qbytes atomic.Int64
	stop   chan struct{}
	drain  chan struct{} // closed by RemovePeer: deliver the queue, then stop
}

// drained reports whether the peer was removed and its queue is empty.
func (p *sender) drained() bool {
	select {
	case <-p.drain:
		return len(p.q) == 0
	default:
		return false
	}
}

func (p *sender) enqueue(b []byte) bool {
	if uint64(p.qbytes.Load())+uint64(len(b)) > p.t.opts.QueueBytes {
		return false
	}
	select {
	case p.q <- b:
		p.qbytes.Add(int64(len(b)))
		return true
	default:
		return false
	}
}

func (p *sender) dequeued(b []byte) { p.qbytes.Add(-int64(len(b))) }

// run keeps one stream to the peer open while there is traffic, and backs
// off after failures (dropping what is queued meanwhile: raft resends).
func (p *sender) run() {
	defer func() {
		p.t.mu.Lock()
		delete(p.t.draining, p)
		p.t.mu.Unlock()
		if f := p.t.senderStopped.Load(); f != nil {
			(*f)()
		}
	}()
	backoff := 10 * time.Millisecond
	for {
		var first []byte
		select {
		case <-p.stop:
			return
		case first = <-p.q:
			p.dequeued(first)
		case <-p.drain:
			select {
			case first = <-p.q:
				p.dequeued(first)
			default:
				return // removed, and nothing left to deliver
			}
		}
		err := p.stream(first)
		select {
		case <-p.stop:
			return
		case <-p.drain:
			return // removed: what the stream did not deliver is dropped
		default:
		}
		if err == nil {
			backoff = 10 * time.Millisecond
			continue
		}
		if errors.Is(err, errs.ErrRemoved) {
			p.t.recv.ReportRemoved(p.id)
		}
		p.t.log.Debug("stream to peer ended", "to", p.id, "err", err)
		p.t.recv.ReportUnreachable(p.id)
		tc, stop := p.t.opts.Clock.NewTimer(backoff)
		for waiting := true; waiting; {
			select {
			case <-p.stop:
				stop()
				return
			case b := <-p.q: // peer down: drop
				p.dequeued(b)
			case <-tc:
				waiting = false
			}
		}
		backoff = min(2*backoff, time.Second)
	}
}

// streamEnd reads an accepted stream's answer to its end: the peer writes
// the error that ended the stream, if one did, as a wire error.
func streamEnd(body io.Reader) error {
	var we wireError
	err := json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(&we)
	switch {
	case err == nil && we.Code != "":
		return we.err(0)
	case err == nil || errors.Is(err, io.EOF):
		return errors.New("stream closed by peer")
	default:
		return fmt.Errorf("stream answer: %w", err)
	}
}

// stream opens a streaming POST and writes frames until the stream fails
// or the peer is stopped. The peer's handler answers 200 as soon as it
// accepts the stream and then reads frames until the body ends; a peer that
// does not answer within HandshakeTimeout (a handler that is not ours, a
// hung process) is treated as unreachable.
//
// The body is a streamBody: net/http's connection writer copies it with
// WriteTo, so frames go from the queue to the socket on that goroutine,
// with no pipe and no second goroutine handing each frame over.
func (p *sender) stream(first []byte) error {
	ctx, cancel := context.WithCancel(p.t.ctx)
	defer cancel()
	body := &streamBody{p: p, ctx: ctx, accepted: make(chan struct{})}
	body.pending = AppendFrame(nil, [][]byte{first})
	req, err := p.t.newRequest(ctx, *p.addr.Load(), PathStream, p.id, body)
	if err != nil {
		return err
	}
	req.ContentLength = -1
	endc := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		resp, err := p.t.client.Do(req)
		if err == nil {
			err = decodeErrorResponse(resp)
			if err == nil {
				close(body.accepted)
				// The peer ends the stream by ending its answer, with the
				// error that ended it when one did.
				err = streamEnd(resp.Body)
			}
			resp.Body.Close()
		}
		endc <- err
	})
	tc, stop := p.t.opts.Clock.NewTimer(p.t.opts.HandshakeTimeout)
	select {
	case <-body.accepted:
		stop()
	case err := <-endc:
		stop()
		return err
	case <-tc:
		return fmt.Errorf("no answer to the stream within %v", p.t.opts.HandshakeTimeout)
	case <-p.stop:
		stop()
		return nil
	}
	drain := p.drain
	var deadline <-chan time.Time
	for {
		select {
		case <-p.stop:
			return nil
		case err := <-endc:
			return err
		case <-drain:
			// Removed: the body ends once the queue is written; a peer
			// that does not take it in time is cut off.
			drain = nil
			tc, stop := p.t.opts.Clock.NewTimer(p.t.opts.HandshakeTimeout)
			defer stop()
			deadline = tc
		case <-deadline:
			return errors.New("removed peer did not take its last messages in time")
		}
	}
}

package frontend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
)

const (
	// watchProgressEvery is how often an idle watch stream is told how far
	// it has seen ({"progress":N}), which also keeps the connection alive.
	watchProgressEvery = 500 * time.Millisecond
	// watchWriteTimeout cuts off a client that reads nothing for this long;
	// one that reads slowly is cut off sooner, by its watcher's buffer
	// filling (a resync error line).
	watchWriteTimeout = 30 * time.Second
	// replayMaxBytes bounds the event lines a resumed watch's replay
	// collects before it writes them: a replay with more ends in a resync
	// error line, as a watcher that falls behind does.
	replayMaxBytes = 64 << 20
	// replayChunk is how much of a replay goes to the client per write
	// deadline.
	replayChunk = 64 << 10
)

// replayGate lets one resumed watch at a time replay the log: each replay
// holds a copy of the catalog, loaded from an image, while it runs. The
// replay collects its event lines in memory and the gate is released
// before they go to the client, so a client that reads slowly (or not at
// all) never holds it.
type replayGate struct {
	once sync.Once
	ch   chan struct{}
}

func (g *replayGate) acquire(ctx context.Context) error {
	g.once.Do(func() { g.ch = make(chan struct{}, 1) })
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *replayGate) release() { <-g.ch }

// watchLine is one event of a watch stream, as examples/API.md shows it.
type watchLine struct {
	Index uint64                   `json:"index"`
	Type  string                   `json:"type"`
	Path  string                   `json:"path"`
	Kind  string                   `json:"kind"`
	Attrs map[string]catalog.Value `json:"attrs"`
}

// watchStream writes newline-delimited JSON to a watch client.
type watchStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	bw      *bufio.Writer
	enc     *json.Encoder
	started bool
}

func newWatchStream(w http.ResponseWriter) *watchStream {
	bw := bufio.NewWriter(w)
	return &watchStream{w: w, rc: http.NewResponseController(w), bw: bw, enc: json.NewEncoder(bw)}
}

// begin sends the 200 and the stream's headers, once.
func (s *watchStream) begin() {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.WriteHeader(http.StatusOK)
	}
}

func (s *watchStream) write(v any) error {
	s.begin()
	if err := s.rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout)); err != nil {
		return err
	}
	return s.enc.Encode(v)
}

// event writes ev as the API's lines.
func (s *watchStream) event(ev catalog.Event) error {
	return eventLines(ev, func(l watchLine) error { return s.write(l) })
}

// writeRaw writes lines already encoded (a replay's), a chunk per write
// deadline.
func (s *watchStream) writeRaw(b []byte) error {
	s.begin()
	for len(b) > 0 {
		n := min(len(b), replayChunk)
		if err := s.rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout)); err != nil {
			return err
		}
		if _, err := s.bw.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// replayLines collects the event lines of a resumed watch's replay, up to
// replayMaxBytes.
type replayLines struct {
	buf bytes.Buffer
	enc *json.Encoder
}

func newReplayLines() *replayLines {
	r := &replayLines{}
	r.enc = json.NewEncoder(&r.buf)
	return r
}

func (r *replayLines) event(ev catalog.Event) error {
	if err := eventLines(ev, func(l watchLine) error { return r.enc.Encode(l) }); err != nil {
		return err
	}
	if r.buf.Len() > replayMaxBytes {
		return fmt.Errorf("%w: the replay holds more than %d bytes of events; re-read and watch from the index read at", catalog.ErrResync, replayMaxBytes)
	}
	return nil
}

// eventLines passes ev to write as the API's lines: a move is a delete of
// the old path and a create at the new one.
func eventLines(ev catalog.Event, write func(watchLine) error) error {
	line := func(typ string, n *catalog.Node) error {
		attrs := n.Attrs
		if attrs == nil {
			attrs = map[string]catalog.Value{}
		}
		return write(watchLine{Index: ev.Index, Type: typ, Path: n.Path, Kind: n.Kind, Attrs: attrs})
	}
	switch ev.Op {
	case catalog.OpCreate:
		return line("create", ev.After)
	case catalog.OpUpdate:
		return line("update", ev.After)
	case catalog.OpDelete:
		return line("delete", ev.Before)
	case catalog.OpMove:
		if err := line("delete", ev.Before); err != nil {
			return err
		}
		return line("create", ev.After)
	}
	return nil // OpResync: the channel closes next, with the watcher's error
}

func (s *watchStream) flush() error {
	if err := s.bw.Flush(); err != nil {
		return err
	}
	return s.rc.Flush()
}

// watch serves GET /v1/watch?prefix=P&from_index=N: the changes under P,
// after N (exclusive) when given, else from now, as newline-delimited JSON,
// with {"progress":N} lines while idle. A resume older than the log is 410
// compacted; a client that falls behind, or a resume whose replay exceeds
// replayMaxBytes, gets a resync error line and the end of the stream.
func (f *Frontend) watch(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if prefix == "" {
		prefix = "/"
	}
	if err := catalog.ValidPath(prefix); err != nil {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "prefix: %v", err)
	}
	var from uint64
	fromGiven := q.Has("from_index")
	if fromGiven {
		var err error
		if from, err = strconv.ParseUint(q.Get("from_index"), 10, 64); err != nil {
			return httpjson.Errorf(http.StatusBadRequest, "bad_request", "from_index %q: want a log index", q.Get("from_index"))
		}
	}
	// The stream ends with the request or with the frontend.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(f.bgCtx, cancel)
	defer stop()

	s := newWatchStream(w)
	opts := catalog.WatchOptions{Prefix: prefix}
	var wt *catalog.Watcher
	if fromGiven {
		if err := f.replays.acquire(ctx); err != nil {
			return apiError(err)
		}
		// The replay goes to memory: the gate is not held while the
		// client reads it.
		replayed := newReplayLines()
		var err error
		wt, err = f.tree.WatchFrom(ctx, from, opts, f.History(), replayed.event)
		f.replays.release()
		switch {
		case errors.Is(err, catalog.ErrCompacted):
			return httpjson.Errorf(http.StatusGone, "compacted", "%v", err)
		case errors.Is(err, catalog.ErrResync):
			_ = s.write(map[string]string{"error": "resync", "message": err.Error()})
			_ = s.flush()
			return nil
		case err != nil:
			return apiError(err)
		}
		if err := s.writeRaw(replayed.buf.Bytes()); err != nil {
			wt.Close()
			return nil
		}
	} else {
		wt = f.tree.Watch(opts)
	}
	defer wt.Close()
	// The client learns at once that the watch is in place, and from where.
	s.begin()
	if p, ok := wt.Progress(); ok {
		if s.write(map[string]uint64{"progress": p}) != nil {
			return nil
		}
	}
	if err := s.flush(); err != nil {
		return nil
	}
	for {
		// Everything ready goes out in one flush.
		ev, ok, err := wt.TryNext()
		if ok {
			if s.event(ev) != nil {
				return nil
			}
			continue
		}
		if err == nil {
			if s.flush() != nil {
				return nil
			}
			// Wait for the next event; a stream idle that long is told how
			// far it has seen.
			wctx, cancelWait := context.WithTimeout(ctx, watchProgressEvery)
			ev, err = wt.Next(wctx)
			cancelWait()
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				if s.event(ev) != nil {
					return nil
				}
				continue
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if p, ok := wt.Progress(); ok {
					if s.write(map[string]uint64{"progress": p}) != nil || s.flush() != nil {
						return nil
					}
				}
				continue
			}
		}
		// Cut off for falling behind, or the catalog was replaced.
		_ = s.write(map[string]string{"error": "resync", "message": err.Error()})
		_ = s.flush()
		return nil
	}
}

package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// httpWatcher is one more watcher, which watches the registers through
// the API (GET /v1/watch, a stream of JSON lines) on a random frontend,
// disconnects, and resumes on another from the last index it saw (now
// and then from the first index the log holds an image for, or from an
// older one): its sessions join the watch checks like the others'.
func (ws *watches) httpWatcher(ctx context.Context, k int, rng *rand.Rand) {
	addr := fmt.Sprintf("watcher-%d:0", k)
	hc := &http.Client{Transport: ws.r.c.Network().Transport(addr)}
	defer hc.CloseIdleConnections()
	for pause(ctx, time.Duration(50+rng.IntN(1000))*time.Millisecond) {
		i, from, ok := ws.resumePoint(k, rng)
		if !ok {
			continue
		}
		ws.httpSession(ctx, hc, k, i, from, time.Duration(100+rng.IntN(5000))*time.Millisecond)
	}
}

// watchLine is one line of a watch stream: an event, a progress mark,
// or the error that ends the stream (a resync).
type watchLine struct {
	Index    uint64                   `json:"index"`
	Type     string                   `json:"type"`
	Path     string                   `json:"path"`
	Attrs    map[string]catalog.Value `json:"attrs"`
	Progress *uint64                  `json:"progress"`
	Error    string                   `json:"error"`
}

// httpSession watches the registers on frontend i over HTTP, resumed
// after from, for d, and records what it saw. A 410 compacted is judged
// as a refused resume; any other refusal (the frontend is starting, a
// reset) ends the session with nothing recorded.
func (ws *watches) httpSession(ctx context.Context, hc *http.Client, k, i int, from uint64, d time.Duration) {
	seg := ws.newSegment(k, i, from) // in the era the request is sent in
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	url := fmt.Sprintf("http://%s/v1/watch?prefix=%s&from_index=%d", frontendtest.Addr(i), watchPrefix, from)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, url, nil)
	if err != nil {
		ws.r.failf("http watch: %v", err)
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusGone:
		ws.judgeCompacted(k, i, from, fmt.Errorf("http watch: 410: %w", catalog.ErrCompacted))
		return
	case http.StatusServiceUnavailable:
		return
	default:
		ws.r.failf("http watch after %d on frontend %d: status %d", from, i, resp.StatusCode)
		return
	}
	ws.mu.Lock()
	ws.segments = append(ws.segments, seg)
	ws.resumes++
	ws.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l watchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			ws.r.failf("http watch on frontend %d: line %q: %v", i, sc.Bytes(), err)
			return
		}
		switch {
		case l.Error != "":
			return // a resync: the client re-reads; the session ends at what it saw
		case l.Progress != nil:
			seg.reached(*l.Progress)
		default:
			e := seen{index: l.Index, path: l.Path}
			switch l.Type {
			case "create":
				e.op, e.value = catalog.OpCreate, l.Attrs["v"].Str()
			case "update":
				e.op, e.value = catalog.OpUpdate, l.Attrs["v"].Str()
			case "delete":
				e.op = catalog.OpDelete
			default:
				ws.r.failf("http watch on frontend %d: event type %q", i, l.Type)
				return
			}
			seg.events = append(seg.events, e)
			seg.upTo = max(seg.upTo, l.Index)
		}
	}
	// The stream ends with the session's time, the frontend's stop or a
	// reset: what it saw stands.
}

package journaltest

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// HandlerClient returns an HTTP client that serves each request in
// process with the handler lookup returns for the request's host, with
// no socket: the raft streams, forwarded proposals and image transfers
// of a cluster in a synctest bubble, where a goroutine blocked on a
// socket would keep virtual time from moving.
func HandlerClient(lookup func(host string) http.Handler) *http.Client {
	return &http.Client{Transport: handlerRoundTripper(lookup)}
}

type handlerRoundTripper func(host string) http.Handler

// RoundTrip runs the handler on its own goroutine, which ends when the
// handler returns; the handler's writes stream through a pipe into the
// response body, and the caller closing the body makes them fail, so a
// handler never outlives its response.
func (lookup handlerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	h := lookup(r.URL.Host)
	if h == nil {
		return nil, fmt.Errorf("no handler serves %s", r.URL.Host)
	}
	if r.Body == nil {
		r = r.Clone(r.Context())
		r.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponseWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		h.ServeHTTP(w, r)
		w.WriteHeader(http.StatusOK)
		_ = pw.Close()
	}()
	select {
	case <-w.ready:
	case <-r.Context().Done():
		_ = pr.CloseWithError(r.Context().Err())
		return nil, r.Context().Err()
	}
	length := int64(-1)
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		length = n
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)), StatusCode: w.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: length, Request: r,
	}, nil
}

// pipeResponseWriter is the handler's side of an in-process response: the
// status and header go out at the first WriteHeader or Write, the body
// through the pipe.
type pipeResponseWriter struct {
	header http.Header
	body   *io.PipeWriter
	once   sync.Once
	ready  chan struct{} // closed once code and sent are set
	code   int
	sent   http.Header
}

func (w *pipeResponseWriter) Header() http.Header { return w.header }

func (w *pipeResponseWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponseWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

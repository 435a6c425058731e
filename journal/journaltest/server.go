package journaltest

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// server is one node's HTTP server with an HTTP transport. It keeps its
// address across the node's restarts and serves whichever journal runs
// there, or refuses every request while none does. With HTTPInProcess it
// has no listener (srv is nil): HandlerClient calls its ServeHTTP.
type server struct {
	addr string
	srv  *http.Server   // nil in process
	wg   sync.WaitGroup // the Serve goroutine

	mu sync.Mutex
	h  http.Handler
}

// listen opens a loopback port, with TLS when cfg is set, and serves it
// until close.
func listen(cfg *tls.Config) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{addr: ln.Addr().String()}
	s.srv = &http.Server{Handler: s}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	s.wg.Go(func() { _ = s.srv.Serve(ln) })
	return s, nil
}

// serve routes the requests to h from now on (nil: the node is down). A
// nil server (the in-memory transport) ignores it.
func (s *server) serve(h http.Handler) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if h == nil {
		// Answer without reading a streaming body: needs full duplex.
		_ = http.NewResponseController(w).EnableFullDuplex()
		http.Error(w, "node down", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// close shuts the server down and waits for its Serve goroutine. A nil
// server ignores it; a second close returns at once.
func (s *server) close() {
	if s == nil || s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.wg.Wait()
}

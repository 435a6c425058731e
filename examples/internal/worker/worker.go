package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/examples/internal/demo"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/examples/internal/ops"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
)

// Config is a worker's configuration: the worker binary's flags.
type Config struct {
	ID         uint64
	Addr       string        // host:port the cluster reaches this worker at
	Listen     string        // host:port to bind; default Addr
	Pprof      bool          // serve net/http/pprof under /debug/pprof/
	StaleAfter time.Duration // default 10 s
	// Token, when set, is the cluster's token, required of every heartbeat
	// and fragment request not made over mutual TLS.
	Token string
	// TLSCert, TLSKey and TLSCA: as the frontend's. With them the port
	// speaks only TLS, and heartbeats and fragments need a member
	// certificate from the CA (a heartbeat's naming its leader).
	TLSCert, TLSKey, TLSCA string
	// Insecure lets the worker start with neither Token nor the TLS files;
	// without it Start refuses with secure.ErrNoCredentials.
	Insecure bool
	Logger   *slog.Logger
}

// Worker is one running worker: a heartbeat responder feeding a cancel
// registry that the fragments register with. Close stops it.
type Worker struct {
	id        uint64
	logger    *slog.Logger
	responder *responder.Responder
	registry  *cancel.Registry
	runs      *demo.Runs
	ln        net.Listener
	srv       *http.Server
	served    chan struct{}
	closeOnce sync.Once
}

// Start serves a worker on cfg.Addr until Close.
func Start(cfg Config) (*Worker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hasCredential := cfg.Token != "" || cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.TLSCA != ""
	if err := secure.RequireCredentials(hasCredential, cfg.Insecure, "-token or -tls-cert/-tls-key/-tls-ca"); err != nil {
		return nil, err
	}
	files, err := secure.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	if files == nil && cfg.Token == "" {
		cfg.Logger.Warn("-insecure: neither -token nor -tls-*: any process that reaches the port can send heartbeats and fragments")
	}
	start := epoch.New()
	registry := cancel.New(cancel.Config{Logger: cfg.Logger})
	resp, err := responder.New(responder.Config{
		ID:         cfg.ID,
		Epoch:      start,
		StaleAfter: cfg.StaleAfter,
		Token:      cfg.Token,
		PeerCerts:  files != nil,
		Logger:     cfg.Logger,
		OnEvent:    func(ev epoch.Event) { registry.Apply(ev) },
	})
	if err != nil {
		registry.Close()
		return nil, err
	}
	w := &Worker{id: cfg.ID, logger: cfg.Logger, responder: resp, registry: registry, runs: demo.NewRuns(), served: make(chan struct{})}

	reg, err := ops.NewRegistry(registry.Collector())
	if err != nil {
		registry.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", ops.Livez)
	mux.Handle("GET /metrics", ops.MetricsHandler(reg))
	if cfg.Pprof {
		ops.MountPprof(mux)
	}
	mux.Handle(responder.Path, resp)
	mux.Handle("GET /v1/status", httpjson.Handler(w.status))
	mux.Handle("GET /v1/fragments", httpjson.Handler(w.fragments))
	mux.Handle("POST "+demo.FragmentPath, memberOnly(files, cfg.Token, httpjson.Handler(w.startFragment)))
	mux.Handle("DELETE "+demo.FragmentPath+"/{query}", memberOnly(files, cfg.Token, httpjson.Handler(w.withdrawFragment)))
	mux.Handle("/", httpjson.NotFound)

	listen := cmp.Or(cfg.Listen, cfg.Addr)
	w.ln, err = net.Listen("tcp", listen)
	if err != nil {
		w.runs.Close()
		registry.Close()
		return nil, fmt.Errorf("listen on %s: %w", listen, err)
	}
	w.ln = secure.Listen(w.ln, files)
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(w.served)
		_ = w.srv.Serve(w.ln)
	}()
	cfg.Logger.Info("worker serving", "addr", w.ln.Addr().String(), "epoch", start.String())
	return w, nil
}

// Addr is the address the worker serves on.
func (w *Worker) Addr() string { return w.ln.Addr().String() }

// Epoch is this worker process's current epoch: the one it drew at
// start, or the fresh one it drew when the leader told it that the log
// ended that one (it was declared dead while cut off).
func (w *Worker) Epoch() epoch.Epoch { return w.responder.Epoch() }

// Fragments lists the fragments this worker ran or runs.
func (w *Worker) Fragments() []demo.RunView { return w.runs.List() }

// Close stops serving, cancels running fragments and waits for them.
func (w *Worker) Close() error {
	w.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.srv.Shutdown(ctx)
		<-w.served
		w.runs.Close()
		w.registry.Close()
		w.logger.Info("worker stopped")
	})
	return nil
}

func (w *Worker) status(rw http.ResponseWriter, _ *http.Request) error {
	httpjson.Write(rw, http.StatusOK, map[string]any{
		"id":    w.id,
		"epoch": w.responder.Epoch().String(),
		"term":  w.responder.Term(),
		"stale": w.responder.Stale(),
	})
	return nil
}

func (w *Worker) fragments(rw http.ResponseWriter, _ *http.Request) error {
	httpjson.Write(rw, http.StatusOK, w.runs.List())
	return nil
}

// startFragment registers a fragment with its coordinator's epoch and runs
// it. A fragment from a coordinator whose epoch is already superseded is
// refused with 409 and recorded as cancelled: it never starts. One from a
// coordinator that no heartbeat has listed yet is refused with 503.
func (w *Worker) startFragment(rw http.ResponseWriter, r *http.Request) error {
	var f demo.Fragment
	if err := httpjson.Decode(rw, r, &f); err != nil {
		return err
	}
	if f.Query == "" || f.Coordinator == 0 || f.DurationMS <= 0 {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "a fragment needs query, coordinator and a positive duration_ms")
	}
	coord, err := epoch.Parse(f.CoordinatorEpoch)
	if err != nil {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "coordinator_epoch: %v", err)
	}
	view := demo.RunView{Query: f.Query, Coordinator: f.Coordinator, CoordinatorEpoch: f.CoordinatorEpoch}
	q, err := w.registry.RegisterFragment(context.Background(), cancel.Member{Node: f.Coordinator, Epoch: coord})
	if err != nil {
		var ce *cancel.CanceledError
		if errors.As(err, &ce) {
			view.State, view.Cause = demo.Cancelled, err.Error()
			w.runs.Record(f.Query, view)
			return httpjson.Errorf(http.StatusConflict, "coordinator_gone", "%v", err)
		}
		if errors.Is(err, cancel.ErrUnknownNode) {
			// No heartbeat has listed the coordinator yet: retry after one.
			return httpjson.Errorf(http.StatusServiceUnavailable, "coordinator_unknown", "%v", err)
		}
		return err
	}
	if err := w.runs.Start(f.Query, view, q, time.Duration(f.DurationMS)*time.Millisecond, nil); err != nil {
		if errors.Is(err, demo.ErrExists) {
			return httpjson.Errorf(http.StatusConflict, "exists", "fragment of query %q is already here", f.Query)
		}
		return httpjson.Errorf(http.StatusServiceUnavailable, "shutting_down", "%v", err)
	}
	httpjson.Write(rw, http.StatusOK, map[string]string{"query": f.Query, "state": demo.Running})
	return nil
}

// withdrawFragment cancels a fragment whose query the coordinator cancelled
// (for example because another of its workers died).
func (w *Worker) withdrawFragment(rw http.ResponseWriter, r *http.Request) error {
	query := r.PathValue("query")
	cause := strings.TrimSpace(r.URL.Query().Get("cause"))
	if cause == "" {
		cause = "cancelled by its coordinator"
	}
	if !w.runs.Cancel(query, errors.New(cause)) {
		return httpjson.Errorf(http.StatusNotFound, "not_found", "no running fragment of query %q", query)
	}
	httpjson.Write(rw, http.StatusOK, map[string]string{"query": query})
	return nil
}

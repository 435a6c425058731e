package ops

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry of its own (never the global one, so two
// nodes in one process each have theirs) holding the Go runtime and
// process collectors and cs.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// MetricsHandler serves reg in the Prometheus text format (GET /metrics).
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Livez answers 200 while the process serves (GET /livez).
func Livez(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"live":true}` + "\n"))
}

// MountPprof serves net/http/pprof under /debug/pprof/ on mux.
func MountPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

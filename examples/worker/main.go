package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/examples/internal/worker"
)

func main() {
	var cfg worker.Config
	flag.Uint64Var(&cfg.ID, "id", 0, "this worker's member id (non-zero, unique in the cluster)")
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:9100", "HOST:PORT the cluster reaches this worker at (heartbeats, fragments, the API)")
	flag.StringVar(&cfg.Listen, "listen", "", "HOST:PORT to bind (default: the value of -addr), for containers and NAT")
	flag.BoolVar(&cfg.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/")
	flag.DurationVar(&cfg.StaleAfter, "stale-after", 10*time.Second, "without a leader heartbeat for this long the worker's view of the frontends is stale, and it cancels nothing on its own")
	flag.StringVar(&cfg.Token, "token", "", "the cluster's token: heartbeats and fragments must carry it (when not over mutual TLS)")
	flag.StringVar(&cfg.TLSCert, "tls-cert", "", "this worker's certificate (PEM; URI SAN metatree://node/<id>): serve HTTPS only")
	flag.StringVar(&cfg.TLSKey, "tls-key", "", "the key of -tls-cert (PEM)")
	flag.StringVar(&cfg.TLSCA, "tls-ca", "", "the cluster's CA certificate (PEM): heartbeats need a frontend certificate it signed")
	flag.BoolVar(&cfg.Insecure, "insecure", false, "run without -token or -tls-*: anyone who reaches the port can send heartbeats and fragments (without it, the worker refuses to start)")
	flag.Parse()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("worker", cfg.ID)
	if cfg.ID == 0 {
		fmt.Fprintln(os.Stderr, "worker: -id is required and must be non-zero")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w, err := worker.Start(cfg)
	if errors.Is(err, secure.ErrNoCredentials) {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	w.Close()
}

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

	"github.com/metatree/metatree/examples/internal/frontend"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/journal"
)

// shutdownTimeout bounds the graceful part of a shutdown: the leadership
// hand-off and the API requests in flight.
const shutdownTimeout = 10 * time.Second

func main() {
	var cfg frontend.Config
	flag.Uint64Var(&cfg.ID, "id", 0, "this frontend's raft and member id (non-zero, never reused)")
	flag.StringVar(&cfg.Dir, "dir", "", "data dir: VERSION, ROLE, journal/, image/")
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:9000", "HOST:PORT peers and clients reach this server at")
	flag.StringVar(&cfg.Listen, "listen", "", "HOST:PORT to bind (default: the value of -addr), for containers and NAT; a specific IP is also the source of connections to other members")
	flag.BoolVar(&cfg.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/")
	flag.Uint64Var(&cfg.PromoteMaxLag, "promote-max-lag", 0, "entries an observer may trail the leader and still be promoted (0: the journal's default, 1000)")
	flag.BoolVar(&cfg.Bootstrap, "bootstrap", false, "start a new cluster with this node as its first member")
	flag.StringVar(&cfg.Join, "join", "", "HOST:PORT of any running member to join the cluster through")
	flag.Func("role", "follower (a voter) or observer (a learner); only with -join", func(s string) (err error) {
		cfg.Role, err = journal.ParseRole(s)
		return err
	})
	flag.StringVar(&cfg.Token, "token", "", "the cluster's join token")
	flag.StringVar(&cfg.TLSCert, "tls-cert", "", "this member's certificate (PEM; URI SAN metatree://node/<id>): serve HTTPS only, mutual TLS between members")
	flag.StringVar(&cfg.TLSKey, "tls-key", "", "the key of -tls-cert (PEM)")
	flag.StringVar(&cfg.TLSCA, "tls-ca", "", "the cluster's CA certificate (PEM), which signs every member's")
	flag.StringVar(&cfg.AuthFile, "auth-file", "", "client API tokens, one '<token> <role>' a line (role read, write or admin)")
	flag.BoolVar(&cfg.Insecure, "insecure", false, "run without -token, -tls-* or -auth-file: anyone who reaches the port can send heartbeats and use the API (without it, the server refuses to start)")
	flag.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", time.Second, "how often the leader heartbeats every member")
	flag.IntVar(&cfg.DeadAfter, "dead-after", 3, "missed heartbeats in a row before a member is declared dead")
	flag.DurationVar(&cfg.StaleAfter, "stale-after", 30*time.Second, "a non-leader this far behind the leader's clock refuses reads")
	flag.DurationVar(&cfg.RequestTimeout, "request-timeout", frontend.DefaultRequestTimeout, "how long a write or a linearizable read waits for a quorum before it fails with 503 no_leader")
	flag.Uint64Var(&cfg.CheckpointEntries, "checkpoint-entries", 100000, "entries after the newest image that trigger a checkpoint")
	flag.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", 60*time.Second, "how often the checkpoint threshold is checked")
	flag.Uint64Var(&cfg.CompactMargin, "compact-margin", 0, "entries kept behind an image for slow followers (0: the journal's default); a bootstrap makes min(this, 10000) the cluster's dedupe window")
	flag.IntVar(&cfg.Quota.MaxNodes, "quota-nodes", 0, "most catalog nodes; a write past it is refused with 507 quota (0: no bound; the same on every member)")
	flag.Int64Var(&cfg.Quota.MaxBytes, "quota-bytes", 0, "most approximate catalog bytes; a write past it is refused with 507 quota (0: no bound; the same on every member)")
	flag.Int64Var(&cfg.ReserveBytes, "reserve-bytes", 0, "free bytes on -dir's filesystem under which writes are refused with 507 no_space until there is room (0: 64 MiB; negative: no guard)")
	flag.BoolVar(&cfg.ForceNewCluster, "force-new-cluster", false, "restart from -dir as the only voter, keeping its data: only after the other voters are lost for good")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", cfg.ID)
	if cfg.ID == 0 || cfg.Dir == "" {
		fmt.Fprintln(os.Stderr, "metaserver: -id (non-zero) and -dir are required")
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fe, err := frontend.Start(ctx, cfg)
	if errors.Is(err, secure.ErrNoCredentials) {
		fmt.Fprintln(os.Stderr, "metaserver:", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "metaserver:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	cfg.Logger.Info("shutting down")
	// /readyz fails from here; a leader hands off before it closes.
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := fe.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "metaserver: shutdown:", err)
		os.Exit(1)
	}
}

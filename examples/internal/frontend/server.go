package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	fe "github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/internal/demo"
	"github.com/metatree/metatree/examples/internal/ops"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// DefaultRequestTimeout is Config.RequestTimeout when it is 0.
const DefaultRequestTimeout = fe.DefaultRequestTimeout

// Config is a metaserver's configuration: the frontend's, plus what the
// demo API adds.
type Config struct {
	fe.Config
	// AuthFile names the client API tokens (secure.LoadAuthFile). It
	// counts as a credential: with it alone the member endpoints are
	// guarded by nothing, as with Insecure, and the API by the tokens.
	AuthFile string
	Pprof    bool // serve net/http/pprof under /debug/pprof/
}

// Frontend is a running frontend with the demo API. The embedded
// public frontend closes it (Close, Shutdown); the demo's own work stops
// first (fe.Config.OnClose).
type Frontend struct {
	*fe.Frontend

	cfg    Config
	logger *slog.Logger
	// The parts, from the public frontend once it started.
	tree     *catalog.Tree
	images   *image.Store
	journal  *journal.Journal
	ckpt     *image.Checkpointer
	registry *cancel.Registry
	members  *heartbeat.Membership
	client   *http.Client
	metrics  http.Handler

	runs *demo.Runs
	// ready is set once the parts above are: the API answers 503 before.
	ready atomic.Bool
	// bgCtx ends the API's long-lived work (watch streams) when the
	// frontend closes.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	stopOnce sync.Once
	replays  replayGate // one resumed watch replays the log at a time
}

// Start starts the public frontend with the demo API as its handler.
func Start(ctx context.Context, cfg Config) (_ *Frontend, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	hasCredential := cfg.Token != "" || cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.TLSCA != "" || cfg.AuthFile != ""
	if err := secure.RequireCredentials(hasCredential, cfg.Insecure, "-token, -tls-cert/-tls-key/-tls-ca or -auth-file"); err != nil {
		return nil, err
	}
	var tokens *secure.Tokens
	if cfg.AuthFile != "" {
		if tokens, err = secure.LoadAuthFile(cfg.AuthFile); err != nil {
			return nil, err
		}
	} else {
		cfg.Logger.Warn("no -auth-file: the client API is open to anyone who reaches the port")
	}
	f := &Frontend{cfg: cfg, logger: cfg.Logger, runs: demo.NewRuns()}
	f.bgCtx, f.bgCancel = context.WithCancel(context.Background())

	pub := cfg.Config
	pub.Insecure = cfg.Insecure || cfg.AuthFile != ""
	pub.Handler = f.routes()
	pub.Middleware = func(h http.Handler) http.Handler { return secure.Authorize(tokens, cfg.Token, h) }
	pub.OnClose = f.stop
	f.Frontend, err = fe.Start(ctx, pub)
	if err != nil {
		f.stop()
		return nil, err
	}
	reg, err := ops.NewRegistry(f.Collectors()...)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	f.metrics = ops.MetricsHandler(reg)
	f.tree, f.images, f.journal = f.Tree(), f.Images(), f.Journal()
	f.ckpt, f.registry, f.members, f.client = f.Checkpointer(), f.Registry(), f.Members(), f.Client()
	f.ready.Store(true)
	return f, nil
}

// stop ends the demo's own work: its queries and its watch streams. The
// public frontend runs it at the start of Close, before the parts close.
func (f *Frontend) stop() {
	f.stopOnce.Do(func() {
		f.ready.Store(false) // new API requests get 503 from here on
		f.runs.Close()
		f.bgCancel()
	})
}

// commit writes b through the public frontend and maps its error to the
// API's statuses; a batch that applied as a no-op returns its result
// with the error.
func (f *Frontend) commit(ctx context.Context, b catalog.Batch) (*catalog.Result, error) {
	res, err := f.Write(ctx, b)
	return res, apiError(err)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/api"
	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/router"
	"github.com/bulkhead-llm/bulkhead/internal/server"
)

func init() {
	register("router", "serve the OpenAI-compatible API on prefill and decode peers (disaggregated mode)", runRouter)
}

func runRouter(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("router")
	cfgPath := fs.String("config", "", "YAML configuration file: tenants, limits and the peers section (required)")
	listen := fs.String("listen", "", "listen address, overriding the config (default 127.0.0.1:8080)")
	prefill := fs.String("prefill", "", "comma-separated prefill control addresses, overriding peers.prefill")
	decode := fs.String("decode", "", "comma-separated decode control addresses, overriding peers.decode")
	metricsListen := fs.String("metrics-listen", "", metricsListenUsage)
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM/SIGINT, how long in-flight requests may take to finish")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkDrain(*drain); err != nil {
		return err
	}
	lf := listenFlags{cfgPath: *cfgPath, listen: *listen, metrics: *metricsListen}
	if err := lf.check(); err != nil {
		return err
	}
	if *cfgPath == "" {
		return usagef("--config is required: the router needs the peers section (auth and addresses)")
	}
	cfg, err := loadConfig(*cfgPath, "")
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *metricsListen != "" {
		cfg.MetricsListen = *metricsListen
	}
	if *prefill != "" {
		cfg.Peers.Prefill = splitList(*prefill)
	}
	if *decode != "" {
		cfg.Peers.Decode = splitList(*decode)
	}
	ln, mln, err := lf.bind(cfg, netListen)
	if err != nil {
		return err
	}
	defer closeListeners(ln, mln)
	log := newLogger(cfg.LogLevel, stderr)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveRouter(ctx, cfg, *drain, ln, mln, stdout, log)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// serveRouter handshakes with cfg's peers, serves the API on ln (bound to
// cfg.Listen) and /metrics on mln (nil: none) until ctx ends, then drains
// and stops. It prints the serving line once serving. The caller closes
// both listeners.
func serveRouter(ctx context.Context, cfg *config.Config, drain time.Duration, ln, mln net.Listener, stdout io.Writer, log *slog.Logger) error {
	auth, err := peerauth.Load(cfg.Peers)
	if err != nil {
		return fmt.Errorf("router: peer auth: %w", err)
	}
	if err := auth.ActAs(peerauth.RoleRouter); err != nil {
		return fmt.Errorf("router: peer auth: %w", err)
	}
	// The router tokenizes, so it loads the model; its fingerprint must
	// match every peer's, or prompts would be tokenized for another model.
	m, err := server.LoadModel(cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := server.Resolve(cfg, m); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	met := metrics.New()
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	rt, err := router.New(hctx, router.Options{
		Prefill: cfg.Peers.Prefill, Decode: cfg.Peers.Decode,
		Auth: auth, Fingerprint: m.Fingerprint(),
		Own:             engine.Limits{ContextLen: cfg.ContextLen, MaxInputTokens: cfg.MaxInputTokens},
		TransferTimeout: time.Duration(cfg.Peers.TransferTimeout) * time.Second,
		Registerer:      met.Registry, Log: log,
	})
	cancel()
	if err != nil {
		return err
	}
	defer rt.Close()
	h, err := api.New(api.Options{
		Backend: rt, Tokenizer: m.Tokenizer, ModelName: m.Name, ChatTemplate: m.ChatTemplate,
		Auth: cfg.Auth, Tenants: cfg.Tenants, Metrics: met, NoMetrics: !cfg.MetricsOnAPI(), Logger: log, MaxBodyBytes: cfg.MaxBodyBytes, Ready: rt.Healthy,
	})
	if err != nil {
		return err
	}
	defer serveMetrics(mln, met, stdout, log)()
	lim := rt.Limits()
	log.Info("router ready", "prefill", strings.Join(cfg.Peers.Prefill, ","), "decode", strings.Join(cfg.Peers.Decode, ","),
		"context_len", lim.ContextLen, "max_input_tokens", lim.MaxInputTokens, "pool_tokens", lim.PoolTokens)
	fmt.Fprintf(stdout, "bulkhead: router serving %s on http://%s/v1 (auth: %s; %d prefill, %d decode peers)\n",
		m.Name, ln.Addr(), authMode(cfg), len(cfg.Peers.Prefill), len(cfg.Peers.Decode))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: server.ReadTimeoutFor(cfg.MaxBodyBytes),
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), drain)
	defer scancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Requests still running end with an error when the router closes
		// their peer connections (deferred Close): never a truncated success.
		srv.Close()
		err = nil
	}
	<-served
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

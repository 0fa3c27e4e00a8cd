package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/server"
)

// metricsListenUsage is the --metrics-listen flag's help, shared by the
// commands that serve the API (prefill and decode have their own:
// roleMetricsUsage).
const metricsListenUsage = "serve /metrics on this address only (operator-only; overrides metrics_listen). With tenants configured /metrics is never on the API listener"

// startMetrics serves m's /metrics on cfg.MetricsListen, when set, and
// announces it on stdout (before the caller announces its main listener,
// which is what scripts and tests wait for). It serves serve's and the
// router's metrics, and prefill's and decode's, whose control listener
// serves them only to peer certificates, so that an operator's scraper
// needs none. The returned stop closes the listener.
func startMetrics(cfg *config.Config, m *metrics.Metrics, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	if cfg.MetricsListen == "" {
		return func() {}, nil
	}
	if _, port, _ := net.SplitHostPort(cfg.MetricsListen); cfg.MetricsListen == cfg.Listen && port != "0" {
		return nil, usagef("--metrics-listen %s is also the listen address; metrics need an address of their own", cfg.MetricsListen)
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	srv := server.MetricsServer(m, log)
	fmt.Fprintf(stdout, "bulkhead: metrics on http://%s/metrics\n", ln.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return func() { srv.Close(); <-done }, nil
}

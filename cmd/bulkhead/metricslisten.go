package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/server"
)

// metricsListenUsage is the --metrics-listen flag's help, shared by the
// commands that serve the API (prefill and decode have their own:
// roleMetricsUsage).
const metricsListenUsage = "serve /metrics on this address only (operator-only; overrides metrics_listen). With tenants configured /metrics is never on the API listener"

// checkListenAddr refuses an address net.Listen could never bind: not
// host:port, or a port that is not a number from 0 to 65535 (a service
// name such as ":http" is refused too: it reads as a typo in a config).
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%s (want host:port, like 127.0.0.1:8080, or 127.0.0.1:0 for any free port)", strings.TrimSuffix(ae.Err, " in address"))
		}
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535 (0 picks a free one)", port)
	}
	return nil
}

// checkListenFlag refuses a bad listen-address flag as a usage error
// naming the flag; "" (not given) passes. Commands call it right after
// parsing, so that a typo fails at once, not after the model has loaded.
func checkListenFlag(name, addr string) error {
	if addr == "" {
		return nil
	}
	if err := checkListenAddr(addr); err != nil {
		return usagef("%s %q: %v", name, addr, err)
	}
	return nil
}

// netListen is net.Listen on TCP.
func netListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// bindAddr checks and binds addr with listen; what names where addr came
// from (the flag, or the config key) in errors.
func bindAddr(what, addr string, listen func(string) (net.Listener, error)) (net.Listener, error) {
	if err := checkListenAddr(addr); err != nil {
		return nil, fmt.Errorf("%s %q: %v", what, addr, err)
	}
	ln, err := listen(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return ln, nil
}

// listenFlags are the --listen and --metrics-listen values of a command
// that serves, and the config they override.
type listenFlags struct {
	cfgPath, listen, metrics string
}

// check refuses a bad --listen or --metrics-listen before anything loads.
func (l listenFlags) check() error {
	if err := checkListenFlag("--listen", l.listen); err != nil {
		return err
	}
	return checkListenFlag("--metrics-listen", l.metrics)
}

// source names where an address came from: the flag when given, else the
// config's key.
func (l listenFlags) source(flagName, flagVal, key string) string {
	switch {
	case flagVal != "":
		return flagName
	case l.cfgPath != "":
		return fmt.Sprintf("%s (in %s)", key, l.cfgPath)
	default:
		return key
	}
}

// bind binds cfg.Listen with listen and, when set, cfg.MetricsListen over
// plain TCP. It runs before the model loads: a mistyped, taken or
// forbidden address then fails in a moment, not after minutes of loading
// (connections that arrive during the load wait in the kernel's backlog).
// The caller closes both (met is nil without a metrics address).
func (l listenFlags) bind(cfg *config.Config, listen func(string) (net.Listener, error)) (api, met net.Listener, err error) {
	if _, port, _ := net.SplitHostPort(cfg.MetricsListen); cfg.MetricsListen == cfg.Listen && port != "0" {
		return nil, nil, usagef("--metrics-listen %s is also the listen address; metrics need an address of their own", cfg.MetricsListen)
	}
	api, err = bindAddr(l.source("--listen", l.listen, "listen"), cfg.Listen, listen)
	if err != nil {
		return nil, nil, err
	}
	if cfg.MetricsListen != "" {
		met, err = bindAddr(l.source("--metrics-listen", l.metrics, "metrics_listen"), cfg.MetricsListen, netListen)
		if err != nil {
			api.Close()
			return nil, nil, err
		}
	}
	return api, met, nil
}

// closeListeners closes the listeners that are not nil. Closing one that
// a server has already closed is harmless.
func closeListeners(lns ...net.Listener) {
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
}

// serveMetrics serves m's /metrics on ln, when not nil, and announces it
// on stdout (before the caller announces its main listener, which is what
// scripts and tests wait for). It serves serve's and the router's
// metrics, and prefill's and decode's, whose control listener serves them
// only to peer certificates, so that an operator's scraper needs none.
// The returned stop closes the listener.
func serveMetrics(ln net.Listener, m *metrics.Metrics, stdout io.Writer, log *slog.Logger) (stop func()) {
	if ln == nil {
		return func() {}
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
	return func() { srv.Close(); <-done }
}
